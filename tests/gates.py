"""Tests that need a part this machine may lack (PgBouncer, a standby's tools, pg_auto_failover,
Chromium): one rule for all of them. Where the part is missing the test skips with the reason;
where its variable says `required` (CI does) it fails instead, so CI never passes by skipping.
"""

from __future__ import annotations

import os

import pytest


def require(variable: str, missing: str | None, *, skipped: str = "") -> None:
    """Return when `missing` is None; else fail under `variable=required`, or skip saying why
    (`skipped` prefixes the skip's reason)."""
    if missing is None:
        return
    if os.environ.get(variable) == "required":
        pytest.fail(f"{variable}=required, but {missing}")
    pytest.skip(f"{skipped}{missing}")
