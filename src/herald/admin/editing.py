"""What every operator-edited record (a template override, a broadcast, a reminder schedule)
shares: the permission check, the lookup by public id and the version check before a change.

Each service passes its own errors, so each answers with its own codes.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Operator
from herald.errors import HeraldError

FindByPublicId = Callable[[AsyncConnection, str, uuid.UUID], Awaitable[RowMapping | None]]


def require(operator: Operator, permission: str, not_found: type[HeraldError]) -> None:
    """`not_found` for a caller without the permission: the same answer as for a missing record,
    so the response never says whether the id exists (R-SEC-7)."""
    if not operator.may(permission):
        raise not_found()


async def find(
    conn: AsyncConnection,
    operator: Operator,
    record_id: str,
    lookup: FindByPublicId,
    not_found: type[HeraldError],
) -> RowMapping:
    """The operator's tenant's record with public id `record_id`; `not_found` for an id that is
    not a UUID, as for one that names nothing."""
    try:
        public_id = uuid.UUID(record_id)
    except ValueError:
        raise not_found() from None
    row = await lookup(conn, operator.tenant_id, public_id)
    if row is None:
        raise not_found()
    return row


def check_version(row: RowMapping, read: int, conflict: type[HeraldError], noun: str) -> None:
    """`conflict` when the record moved past the version the caller read (compare-and-set)."""
    if row["version"] != read:
        raise conflict(
            f"the {noun} is at version {row['version']}, not {read}; re-read it and try again"
        )
