"""HTTP routes of the devices stage (to be filled in)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
