"""HTTP routes of the admin.dead_letters stage (to be filled in)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
