"""HTTP routes of the admin.history stage (to be filled in)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
