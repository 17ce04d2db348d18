"""HTTP routes of the realtime stage (to be filled in)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
