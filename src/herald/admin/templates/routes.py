"""HTTP routes of the admin.templates stage (to be filled in)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
