"""Follow-ups: notify when armed, remind once unless acknowledged, exactly once per transition.

In the host's own transaction (sync, and async with the `a` prefix like send()/asend())::

    with engine.begin() as tx:
        ...  # mark the student absent
        herald.followups.arm(
            tx, tenant, f"absence:{day}:{student}",
            kind="attendance.event", reminder_kind="attendance.reminder",
            audience={"kind": "guardians_of_users", "userIds": [student]},
            variables={"studentName": name, "date": day, "eventType": "absent"},
        )

`acknowledge`, `reopen` and `cancel` take the tenant and the key. `herald scheduler` sweeps.
"""

from __future__ import annotations

from herald.followups.service import (
    Armed,
    aacknowledge,
    aarm,
    acancel,
    acknowledge,
    areopen,
    arm,
    cancel,
    reopen,
)

__all__ = [
    "Armed",
    "aacknowledge",
    "aarm",
    "acancel",
    "acknowledge",
    "areopen",
    "arm",
    "cancel",
    "reopen",
]
