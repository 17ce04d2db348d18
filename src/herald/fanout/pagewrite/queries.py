"""One fan-out batch as ONE statement: the audience page, its recipients and their deliveries.

PostgreSQL does the per-person work; Python sends only what is the same for every person of the
event (the channel decisions that follow from the kind, the category's code defaults, the
in-app wording per template locale). The statement is a chain of CTEs:

  page   the audience keyset page (herald.audience: same fragments, same cursor, same freeze)
  ins_r  INSERT … SELECT of the page's admitted people into notification_recipient,
         ON CONFLICT (event_id, user_public_id_snapshot) DO NOTHING (R-FANOUT-10), RETURNING
         only the rows written now: a redelivered page writes no delivery twice
  loc    the page's distinct locales → the in-app wording each gets (same choice as
         rendering.render._effective_locale: the locale, else its language, else the default)
  ins_d  INSERT … SELECT of one delivery per (new recipient, requested channel) — one per
         active token for push (R-FANOUT-6) — each born in its final fan-out state: the kind
         decides skipped_no_template, the person's status skipped_recipient_gone, the stored
         preferences (joined per row: override, then channel switch, then the category's code
         default, unless the kind is unsuppressible) skipped_preference (R-FANOUT-11), then
         in_app delivered with its wording (R-FANOUT-12) and remote channels queued (R-FANOUT-1);
         for a deliverAt event every row is due at its person's own moment (their zone's entry
         of the event's zone → moment table) and the in-app row is queued until then too
  ins_s  (a kind with an escalation plan, herald.scheduling.escalation) one step row per (new
         recipient, later step of the plan), due at the in-app row's own time (now(), or the
         person's deliverAt moment) plus the plan's cumulative delays (parameters
         `escalation_channels` / `escalation_offsets`, read afresh each batch so a tenant's
         override applies); the plan's channels are then not among `channels`
  result one row: the page's length and last person (the cursor), the counts, and the in-app
         rows for the realtime notices published after commit.

The in-app wording arrives as parameters (`wording_params`): rendered once per template locale
with a per-batch sentinel in place of the recipient's name (herald.fanout.wording), the name put
in here with replace(). A kind whose in-app builder is a function is rendered the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by, insert
from sqlalchemy.sql.expression import CTE

from herald.db import queue
from herald.db import schema as s
from herald.delivery.queries import DELIVERY_CHANNEL
from herald.fanout.wording import FALLBACK, InAppWording
from herald.kinds import Kind
from herald.preferences.service import category_default

GONE_STATUSES = ("suspended",)
# The page's cursor: the one parameter that changes from batch to batch.
CURSOR = bindparam("fanout_after", type_=BigInteger)


def statement(
    page: Select[Any],
    *,
    tenant_id: str,
    event_id: int,
    occurred_at: datetime,
    category: str,
    channels: Sequence[str],
    kind: Kind | None,
    renders_in_app: bool,
    deliver_at: bool = False,
    escalates: bool = False,
) -> Select[Any]:
    """The batch's one statement (see the module docstring). Built once per event and run page
    after page: the page's cursor is the CURSOR parameter, the in-app wording the parameters of
    `wording_params` (read afresh for every batch), and for a `deliver_at` event each zone's
    moment the parameters of `deliver_params`: every delivery is due at its person's moment
    (their directory zone's, else the default's), and the in-app row is held on the queue until
    then (queued, not delivered: the maintenance tick's release_due_inbox, in
    herald.delivery, makes it delivered at that moment)."""
    pg = page.cte("page")
    r = s.notification_recipient
    ro = s.role
    scope = select(ro.c.scope_kind).where(ro.c.id == pg.c.role_id).scalar_subquery()
    name = func.coalesce(pg.c.full_name, "there")  # R-AUD-15
    ins_r = (
        insert(r)
        .from_select(
            [
                "tenant_id",
                "event_id",
                "user_id",
                "user_public_id_snapshot",
                "audience_role_id",
                "audience_scope_kind",
                "variables",
                "locale",
                "occurred_at",
            ],
            select(
                literal(tenant_id, Text),
                literal(event_id, BigInteger),
                pg.c.id,
                pg.c.public_id,
                pg.c.role_id,
                scope,
                func.jsonb_build_object("name", name),
                pg.c.locale,
                literal(occurred_at, s.TZ),
            )
            # People who joined after a broadcast's freeze move the cursor only (R-BCAST-8).
            .where(pg.c.admitted)
            .order_by(pg.c.id),
        )
        # The key includes occurred_at, the partition key: fixed per event, so it adds nothing.
        .on_conflict_do_nothing(
            index_elements=[r.c.event_id, r.c.user_public_id_snapshot, r.c.occurred_at]
        )
        .returning(r.c.id, r.c.user_id, r.c.public_id, r.c.audience_role_id)
        .cte("ins_r")
    )
    loc = _locales(pg) if renders_in_app and "in_app" in channels else None
    branches = [_channel_rows(pg, ins_r, loc, kind, category, ch, deliver_at) for ch in channels]
    d = s.notification_delivery
    rows = union_all(*branches).subquery("rows") if len(branches) > 1 else branches[0].subquery()
    now = func.now()
    source: Any = rows
    due: ColumnElement[Any] = now
    if deliver_at:
        # Each person's moment: their zone's entry of the event's zone → moment arrays (one
        # probe of person by key a row, a hash of the arrays), the default zone's otherwise.
        dp = s.person.alias("dp")
        dz = (
            func.unnest(
                cast(bindparam("deliver_zones", type_=ARRAY(Text)), ARRAY(Text)),
                cast(bindparam("deliver_moments", type_=ARRAY(s.TZ)), ARRAY(s.TZ)),
            )
            .table_valued("zone", "moment")
            .render_derived(name="dz")
        )
        source = rows.outerjoin(dp, dp.c.id == rows.c.user_id).outerjoin(
            dz, dz.c.zone == dp.c.timezone
        )
        due = func.coalesce(dz.c.moment, bindparam("deliver_default", type_=s.TZ))
    skipped = rows.c.status.like("skipped%")
    ins_d = (
        insert(d)
        .from_select(
            [
                "tenant_id",
                "event_id",
                "recipient_id",
                "user_id",
                "channel",
                "provider_target_id",
                "status",
                "queued_at",
                "next_attempt_at",
                "delivered_at",
                "skipped_at",
                "rendered_title",
                "rendered_body",
                "template_version",
                "rendered_hash",
                "occurred_at",
            ],
            select(
                literal(tenant_id, Text),
                literal(event_id, BigInteger),
                rows.c.recipient_id,
                rows.c.user_id,
                rows.c.channel,
                rows.c.target_id,
                rows.c.status,
                now,
                due,
                case((rows.c.status == "delivered", now)),
                case((skipped, now)),
                rows.c.title,
                rows.c.body,
                rows.c.template_version,
                rows.c.rendered_hash,
                # The recipient's month (its partition key), so the delivery lives beside it.
                literal(occurred_at, s.TZ),
            ).select_from(source),
        )
        .returning(
            d.c.id,
            d.c.tenant_id,
            d.c.recipient_id,
            d.c.channel,
            d.c.status,
            d.c.occurred_at,
            d.c.next_attempt_at,
        )
        .cte("ins_d")
    )
    # The queued rows' queue rows, in the same statement (herald.db.queue); counted below, so
    # the step is part of the statement.
    ins_q = queue.enter_queue(ins_d).returning(queue.q.c.delivery_id).cte("ins_q")
    shown = (
        select(ins_r.c.user_id, ins_r.c.public_id, ins_r.c.audience_role_id)
        .select_from(ins_d.join(ins_r, ins_r.c.id == ins_d.c.recipient_id))
        .where(ins_d.c.channel == "in_app", ins_d.c.status == "delivered")
        .subquery("shown")
    )
    queued = select(func.count()).select_from(ins_q).scalar_subquery()
    steps: ColumnElement[Any] = literal(0, Integer)
    if escalates:
        assert kind is not None
        ins_s = _escalation_steps(
            ins_r, tenant_id, event_id, occurred_at, category, kind, ins_d if deliver_at else None
        )
        steps = select(func.count()).select_from(ins_s).scalar_subquery()
    # The channels of the rows queued, e.g. 'email' or 'email,sms': only those senders wake
    # (herald.runtime.worker.ChannelWakes).
    queued_kinds = (
        select(ins_d.c.channel).where(ins_d.c.status == "queued").distinct().subquery("queued_on")
    )
    queued_channels = select(
        func.string_agg(
            queued_kinds.c.channel,
            aggregate_order_by(literal_column("','"), queued_kinds.c.channel),
        )
    ).scalar_subquery()
    return select(
        select(func.count()).select_from(pg).scalar_subquery().label("page_size"),
        select(func.max(pg.c.id)).scalar_subquery().label("last_person"),
        select(func.count()).select_from(ins_r).scalar_subquery().label("recipients"),
        select(func.count()).select_from(ins_d).scalar_subquery().label("deliveries"),
        queued.label("queued"),
        steps.label("escalation_steps"),
        # The delivery workers' wake-up, in this statement rather than a round trip of its own;
        # like any NOTIFY it is delivered only if the batch commits.
        case((queued > 0, func.pg_notify(DELIVERY_CHANNEL, queued_channels))).label("woke"),
        select(func.array_agg(shown.c.user_id)).scalar_subquery().label("shown_people"),
        select(func.array_agg(shown.c.public_id)).scalar_subquery().label("shown_recipients"),
        select(func.array_agg(shown.c.audience_role_id)).scalar_subquery().label("shown_roles"),
    )


def _escalation_steps(
    ins_r: CTE,
    tenant_id: str,
    event_id: int,
    occurred_at: datetime,
    category: str,
    kind: Kind,
    held: CTE | None = None,
) -> CTE:
    """The step rows of the plan for the page's new recipients (ON CONFLICT: a redelivered page
    writes none twice). The plan is two parameter arrays, the channel and the cumulative offset
    in seconds of each step; the step index is its ordinality. Offsets count from now(), or,
    for a deliverAt event (`held`: the page's delivery rows), from the person's in-app row's own
    moment: the plan starts when the inbox copy appears."""
    st = s.notification_escalation_step
    plan = (
        func.unnest(
            cast(bindparam("escalation_channels", type_=ARRAY(Text)), ARRAY(Text)),
            cast(bindparam("escalation_offsets", type_=ARRAY(Integer)), ARRAY(Integer)),
        )
        .table_valued("channel", "offset_seconds", with_ordinality="step_index")
        .render_derived(name="plan")
    )
    start: ColumnElement[Any] = func.now()
    source: Any = ins_r.join(plan, true())
    if held is not None:
        source = source.join(
            held, and_(held.c.recipient_id == ins_r.c.id, held.c.channel == "in_app")
        )
        start = held.c.next_attempt_at
    rows = select(
        literal(tenant_id, Text),
        literal(event_id, BigInteger),
        ins_r.c.id,
        literal(occurred_at, s.TZ),
        ins_r.c.user_id,
        literal(category, Text),
        literal(not kind.unsuppressible, Boolean),
        cast(plan.c.step_index, Integer),
        plan.c.channel,
        start + plan.c.offset_seconds * literal_column("interval '1 second'"),
    ).select_from(source)
    return (
        insert(st)
        .from_select(
            [
                "tenant_id",
                "event_id",
                "recipient_id",
                "occurred_at",
                "person_id",
                "category",
                "suppressible",
                "step_index",
                "channel",
                "due_at",
            ],
            rows,
        )
        .on_conflict_do_nothing(index_elements=[st.c.recipient_id, st.c.step_index])
        .returning(st.c.id)
        .cte("ins_s")
    )


def escalation_params(plan: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """The plan (channel, cumulative offset in seconds) as `_escalation_steps`' parameters."""
    return {
        "escalation_channels": [channel for channel, _ in plan],
        "escalation_offsets": [offset for _, offset in plan],
    }


def wording_params(wording: InAppWording | None) -> dict[str, Any]:
    """The in-app wording (herald.fanout.wording) as the statement's parameters: the names of
    `_locales`' bind parameters (empty arrays when in_app is not sent)."""
    if wording is None:
        return {"wording_keys": [], "wording_titles": [], "wording_bodies": [],
                "wording_versions": [], "name_sentinel": ""}  # fmt: skip
    keys = list(wording.by_locale)
    texts = [wording.by_locale[k] for k in keys]
    return {
        "wording_keys": keys,
        "wording_titles": [t[0] if t else None for t in texts],
        "wording_bodies": [t[1] if t else None for t in texts],
        "wording_versions": [t[2] if t else None for t in texts],
        "name_sentinel": wording.sentinel,
    }


def deliver_params(moments: dict[str, datetime], default: datetime) -> dict[str, Any]:
    """deliverAt's moment per zone (herald.fanout.service.local_moments) as the statement's
    parameters, and the default zone's for a person whose zone is none or unknown."""
    return {
        "deliver_zones": list(moments),
        "deliver_moments": list(moments.values()),
        "deliver_default": default,
    }


def _locales(pg: CTE) -> CTE:
    """The page's distinct locales → their wording: the locale's own, else its language's, else
    the fallback's (rendering.render._effective_locale). A chosen locale whose wording does not
    render yields a NULL body, as render() yields None."""
    table = (
        func.unnest(
            cast(bindparam("wording_keys", type_=ARRAY(Text)), ARRAY(Text)),
            cast(bindparam("wording_titles", type_=ARRAY(Text)), ARRAY(Text)),
            cast(bindparam("wording_bodies", type_=ARRAY(Text)), ARRAY(Text)),
            cast(bindparam("wording_versions", type_=ARRAY(Integer)), ARRAY(Integer)),
        )
        .table_valued("key", "title", "body", "version")
        .render_derived(name="wording")
    )
    page_locales = select(pg.c.locale).distinct().subquery("page_locales")
    language = func.lower(func.split_part(func.replace(page_locales.c.locale, "_", "-"), "-", 1))
    rank = case(
        (table.c.key == page_locales.c.locale, 0),
        (table.c.key == language, 1),
        else_=2,
    )
    chosen = (
        select(table.c.title, table.c.body, table.c.version)
        .where(
            or_(
                table.c.key == page_locales.c.locale,
                table.c.key == language,
                table.c.key == FALLBACK,
            )
        )
        .order_by(rank)
        .limit(1)
        .lateral("chosen")
    )
    return (
        select(page_locales.c.locale, chosen.c.title, chosen.c.body, chosen.c.version)
        .select_from(page_locales.join(chosen, true()))
        .cte("loc")
    )


def _channel_rows(
    pg: CTE,
    ins_r: CTE,
    loc: CTE | None,
    kind: Kind | None,
    category: str,
    channel: str,
    deliver_at: bool = False,
) -> Select[Any]:
    """(recipient_id, user_id, channel, target_id, status, title, body, template_version, rendered_hash)
    for one requested channel. The decisions come in this order: the kind, the person's status,
    the preferences, then the channel's own outcome."""
    ch = literal(channel, Text)
    no_text = cast(null(), Text)
    no_target = cast(null(), BigInteger)
    no_version = cast(null(), Integer)
    base = ins_r.join(pg, pg.c.id == ins_r.c.user_id)
    if kind is None or channel not in kind.channels:
        # R-STATE-3: the kind cannot be sent on this channel.
        return select(
            ins_r.c.id.label("recipient_id"),
            ins_r.c.user_id.label("user_id"),
            ch.label("channel"),
            no_target.label("target_id"),
            literal("skipped_no_template", Text).label("status"),
            no_text.label("title"),
            no_text.label("body"),
            no_version.label("template_version"),
            no_text.label("rendered_hash"),
        ).select_from(base)
    # Code constants, in the SQL text (no expanding parameter).
    gone = pg.c.status.in_([literal_column(f"'{status}'", Text) for status in GONE_STATUSES])
    if kind.unsuppressible:
        allowed: ColumnElement[bool] = true()  # R-PREF-6: nothing stored can turn it off
    else:
        np = s.notification_preference.alias("np")
        cp = s.notification_channel_preference.alias("cp")
        base = base.outerjoin(
            np,
            and_(
                np.c.person_id == ins_r.c.user_id,
                np.c.category == literal(category, Text),
                np.c.channel == ch,
            ),
        ).outerjoin(cp, and_(cp.c.person_id == ins_r.c.user_id, cp.c.channel == ch))
        # Override, then the channel switch, then the category's code default (R-PREF-8..10).
        allowed = func.coalesce(
            np.c.enabled, cp.c.enabled, literal(category_default(category, channel), Boolean)
        )
    title: ColumnElement[Any] = no_text
    body: ColumnElement[Any] = no_text
    version: ColumnElement[Any] = no_version
    content_hash: ColumnElement[Any] = no_text
    target: ColumnElement[Any] = no_target
    if channel == "in_app":
        assert loc is not None
        base = base.outerjoin(loc, loc.c.locale == pg.c.locale)
        name = func.coalesce(pg.c.full_name, "there")
        sentinel = bindparam("name_sentinel", type_=Text)
        rendered_title = func.replace(loc.c.title, sentinel, name)
        rendered_body = func.replace(loc.c.body, sentinel, name)
        # deliverAt: the inbox row waits on the queue for the person's moment, like the rest.
        shown = "queued" if deliver_at else "delivered"
        outcome: ColumnElement[Any] = case(
            (loc.c.body.is_(None), "skipped_no_template"), else_=shown
        )
        delivered = and_(loc.c.body.is_not(None), ~gone, allowed)
        material = func.convert_to(func.coalesce(rendered_title, ""), "UTF8").op("||")(
            literal_column("'\\x00'::bytea")
        )
        material = material.op("||")(func.convert_to(rendered_body, "UTF8"))
        if kind.persist_rendered:
            title = case((delivered, rendered_title))
            body = case((delivered, rendered_body))
        version = case((delivered, loc.c.version))
        content_hash = case((delivered, func.encode(func.sha256(material), "hex")))
    elif channel == "push":
        t = s.notification_push_token.alias("tok")
        # One row per active token, but only for a person who may get push at all.
        base = base.outerjoin(
            t, and_(t.c.person_id == ins_r.c.user_id, t.c.is_active, ~gone, allowed)
        )
        outcome = case((t.c.id.is_(None), "skipped_no_destination"), else_="queued")
        target = t.c.id
    else:
        # Remote channels are rendered at send time, after the secret is resolved (R-SECRET-4).
        # A kind with a digest on this channel waits for its window (herald.digests).
        held = kind.digest is not None and channel in kind.digest.channels
        outcome = literal("held" if held else "queued", Text)
    status = case(
        (gone, "skipped_recipient_gone"),  # decision 5
        (~allowed, "skipped_preference"),
        else_=outcome,
    )
    return select(
        ins_r.c.id.label("recipient_id"),
        ins_r.c.user_id.label("user_id"),
        ch.label("channel"),
        cast(target, BigInteger).label("target_id"),
        cast(status, Text).label("status"),
        cast(title, Text).label("title"),
        cast(body, Text).label("body"),
        cast(version, Integer).label("template_version"),
        cast(content_hash, Text).label("rendered_hash"),
    ).select_from(base)


def notices_of(row: Any) -> list[tuple[int, uuid.UUID, int | None]]:
    """(person_id, recipient public id, role id) of each in-app row the batch delivered."""
    people = row.shown_people or []
    return list(zip(people, row.shown_recipients or [], row.shown_roles or [], strict=True))
