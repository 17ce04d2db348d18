"""HTTP routes of the feed stage (to be filled in)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
