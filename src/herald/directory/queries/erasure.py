"""SQL of erasing a person (R-ERASE-1..3): one transaction, the caller's. The person's
personal data goes from every row that holds it; what remains refers to nobody."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import (
    and_,
    cast,
    delete,
    func,
    literal,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONPATH
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from herald.db import schema as s


@dataclass(frozen=True)
class ErasablePerson:
    id: int
    public_id: uuid.UUID


async def lock_person_for_erasure(
    conn: AsyncConnection, tenant_id: str, external_id: str
) -> ErasablePerson | None:
    """The person (live or soft-deleted), locked until the erasure commits; None when absent."""
    row = (
        await conn.execute(
            select(s.person.c.id, s.person.c.public_id)
            .where(s.person.c.tenant_id == tenant_id, s.person.c.external_id == external_id)
            .with_for_update()
        )
    ).first()
    return None if row is None else ErasablePerson(id=row.id, public_id=row.public_id)


async def scrub_deliveries_of_person(conn: AsyncConnection, person_id: int) -> int:
    """Null the masked address and the stored rendering on every delivery beneath the person's
    recipient rows (R-ERASE-2), and the person's id copied there (as the recipient's is, below);
    returns how many deliveries that covered."""
    d, r = s.notification_delivery, s.notification_recipient
    result = await conn.execute(
        update(d)
        .where(
            d.c.recipient_id == r.c.id,
            r.c.user_id == person_id,
        )
        .values(
            user_id=None,
            destination_hint=None,
            rendered_title=None,
            rendered_body=None,
            rendered_hash=None,
        )
    )
    return int(result.rowcount)


async def scrub_variables_of_events_for(
    conn: AsyncConnection, tenant_id: str, external_id: str
) -> int:
    """Empty the variables of the tenant's events addressed to this person alone — a `users`
    audience naming only them, or a compound of such members — and return how many changed.

    Only there are the variables theirs alone: an event to a group, a role, everyone, a segment
    or someone's guardians was received by others too, and its variables are the record of what
    those others were told; nothing in a variable says which values are about whom, so those
    events keep theirs. The audience itself keeps the external id (the host's own key for the
    person): it is what the event was, and it carries nothing the host does not already hold.
    """
    e = s.notification_event
    me = func.jsonb_build_array(external_id)
    user_ids = e.c.audience["userIds"]
    member_ids = func.jsonb_path_query_array(
        e.c.audience, cast(literal("$.any[*].userIds[*]"), JSONPATH)
    )
    only_me = or_(
        and_(
            e.c.audience["kind"].astext == "users",
            user_ids.op("<@")(me),
            user_ids.op("@>")(me),
        ),
        and_(
            e.c.audience["kind"].astext == "compound",
            ~func.jsonb_path_exists(
                e.c.audience, cast(literal('$.any[*] ? (@.kind != "users")'), JSONPATH)
            ),
            member_ids.op("<@")(me),
            member_ids.op("@>")(me),
        ),
    )
    result = await conn.execute(
        update(e)
        .where(e.c.tenant_id == tenant_id, only_me, e.c.variables != literal_column("'{}'::jsonb"))
        .values(variables=literal_column("'{}'::jsonb"))
    )
    return int(result.rowcount)


async def orphan_recipients_of_person(conn: AsyncConnection, person_id: int) -> int:
    """Detach the person's recipient rows, keeping them and their uuid snapshot (R-ERASE-1), and
    empty their per-recipient variables (the fan-out copies the person's name there, R-ERASE-3).
    user_id is nulled here rather than left to the foreign key's SET NULL, so the person's delete
    that follows finds nothing left to update."""
    r = s.notification_recipient
    result = await conn.execute(
        update(r)
        .where(r.c.user_id == person_id)
        .values(user_id=None, variables=literal_column("'{}'::jsonb"))
    )
    return int(result.rowcount)


def email_hash(email: ColumnElement[str]) -> ColumnElement[str]:
    """The undeliverable_address key of an email, exactly as herald.receipts writes it."""
    return func.encode(func.sha256(func.convert_to(func.lower(func.btrim(email)), "UTF8")), "hex")


def phone_hash(phone: ColumnElement[str]) -> ColumnElement[str]:
    """The undeliverable_address key of a phone number, exactly as herald.receipts writes it."""
    digits = func.regexp_replace(phone, "[^0-9+]", "", "g")
    return func.encode(func.sha256(func.convert_to(digits, "UTF8")), "hex")


async def delete_undeliverable_of_person(conn: AsyncConnection, person_id: int) -> int:
    """The person's email address and phone number, if a hard bounce marked them undeliverable,
    are forgotten with them (only their hashes were kept, but a hash of a known address
    identifies it)."""
    u, p = s.undeliverable_address, s.person
    result = await conn.execute(
        delete(u).where(
            u.c.tenant_id == p.c.tenant_id,
            or_(
                and_(u.c.channel == "email", u.c.address_hash == email_hash(p.c.email)),
                and_(u.c.channel == "sms", u.c.address_hash == phone_hash(p.c.phone)),
            ),
            p.c.id == person_id,
        )
    )
    return int(result.rowcount)


async def delete_followups_naming_person(
    conn: AsyncConnection, tenant_id: str, external_id: str
) -> int:
    """Follow-ups whose audience names the person (they are about or addressed to them, and
    their variables may carry the person's name) go with the person."""
    f = s.followup
    names = func.jsonb_build_object("userIds", func.jsonb_build_array(external_id))
    result = await conn.execute(
        delete(f)
        .where(
            f.c.tenant_id == tenant_id,
            or_(
                f.c.audience.op("@>")(names),
                f.c.audience["any"].op("@>")(func.jsonb_build_array(names)),
            ),
        )
        .returning(f.c.id)
    )
    return len(result.all())


async def delete_escalation_steps_of_person(conn: AsyncConnection, person_id: int) -> int:
    """The person's escalation steps (docs/escalation.md): a pending one must never send to an
    erased person, and a decided one says what was sent to them."""
    st = s.notification_escalation_step
    result = await conn.execute(delete(st).where(st.c.person_id == person_id))
    return int(result.rowcount)


async def hard_delete_person(conn: AsyncConnection, person_id: int) -> None:
    """The person row itself; role grants, memberships, guardianships, preferences, push tokens
    and feed read receipts go with it by their foreign keys' cascade."""
    await conn.execute(delete(s.person).where(s.person.c.id == person_id))
