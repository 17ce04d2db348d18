"""The kinds admin: the registry's kinds as operators see them, and escalation delay overrides."""
