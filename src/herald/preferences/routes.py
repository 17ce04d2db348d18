"""HTTP routes of the preferences stage (to be filled in)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
