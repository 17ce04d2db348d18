"""Interpolation, escaping, action-URL safety and the per-channel render step."""
