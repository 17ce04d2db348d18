"""Every table and constraint, declared once; Alembic and the queries both use this module.

Conventions: every table carries `tenant_id`; every externally visible id is a uuid `public_id`;
internal joins use bigint ids; every timestamp is timestamptz (R-SCHEMA-58); every vocabulary
column has a CHECK generated from herald.vocabulary (R-SCHEMA-4) as an explicit IN list, never a
LIKE pattern (R-SCHEMA-28).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    Time,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP, UUID

from herald import vocabulary

metadata = MetaData(
    naming_convention={
        "ix": "%(table_name)s_%(column_0_N_name)s_idx",
        "uq": "%(table_name)s_%(column_0_N_name)s_key",
        "ck": "%(table_name)s_%(constraint_name)s_check",
        "fk": "%(table_name)s_%(column_0_name)s_fkey",
        "pk": "%(table_name)s_pkey",
    }
)

TZ = TIMESTAMP(timezone=True)
NOW = text("now()")


def sql_list(values: Iterable[str]) -> str:
    """Render a vocabulary tuple as a SQL literal list: ('a', 'b')."""
    return "(" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


def vocab_check(
    column: str, values: Iterable[str], name: str, *, nullable: bool = False
) -> CheckConstraint:
    """A CHECK that `column` is one of the vocabulary values (R-SCHEMA-4)."""
    predicate = f"{column} IN {sql_list(values)}"
    if nullable:
        predicate = f"{column} IS NULL OR {predicate}"
    return CheckConstraint(predicate, name=name)


def _id() -> Column[int]:
    return Column("id", BigInteger, Identity(always=False), primary_key=True)


def _tenant() -> Column[str]:
    return Column("tenant_id", Text, nullable=False)


# A version-7 UUID (RFC 9562): the first 48 bits the clock's Unix milliseconds, then the version,
# then 74 random bits of gen_random_uuid()'s (its variant kept). Written as an expression rather
# than PostgreSQL 18's uuidv7() so that it is the same on every supported server. Migration 0022
# writes the same text; tests/migration holds the two equal.
TIME_ORDERED_UUID = (
    "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING "
    "substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) "
    "FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
)


def _public_id(*, unique: bool = True, time_ordered: bool = False) -> Column[object]:
    """The id the API shows. `time_ordered` for the tables every send writes to by the million
    (the event, its recipients and deliveries, their dead letters and webhook messages): a random
    (version-4) key lands each insert, and each non-HOT update's new index entry, on a random leaf
    of its unique index, which past shared_buffers is a page read and a dirty page written per
    row; a version-7 key lands them on the index's newest leaves (docs/scaling.md, index maintenance). Its 74
    random bits keep it unguessable; it tells whoever holds it when the row was made, which each
    of these rows already shows beside it. A person's, a key's or a group's id stays random: it
    would tell when the account was made, and those tables are small."""
    return Column(
        "public_id",
        UUID(as_uuid=True),
        nullable=False,
        unique=unique,
        server_default=text(TIME_ORDERED_UUID if time_ordered else "gen_random_uuid()"),
    )


def _month_key() -> Column[object]:
    """The partition key of a monthly-partitioned table (herald.db.partitions): the event's
    occurred_at, copied to the row; part of the primary key, as PostgreSQL requires."""
    return Column("occurred_at", TZ, nullable=False, primary_key=True)


# PostgreSQL requires the partition key in every unique key of a partitioned table; the month's
# partitions are created by herald.db.partitions (migration 0021, then the maintenance tick).
PARTITION_BY = "RANGE (occurred_at)"


def _created_at() -> Column[object]:
    return Column("created_at", TZ, nullable=False, server_default=NOW)


# ---------------------------------------------------------------------------------------------
# Directory: written by the host application, read by Herald.

person = Table(
    "person",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("external_id", Text, nullable=False),
    Column("full_name", Text),
    Column("email", Text),
    Column("phone", Text),
    Column("locale", Text, nullable=False, server_default="en"),
    Column("timezone", Text),
    Column("country", String(2)),
    Column("status", Text, nullable=False, server_default="active"),
    Column("telegram_chat_id", Text),
    Column("telegram_can_write", Boolean, nullable=False, server_default=text("true")),
    # Staff chat destinations (issue 46): a Slack user or channel id, and a Teams incoming or
    # Workflows webhook URL (checked by the SSRF guard when set; never logged or shown). The
    # _can_write flags drop when the provider says the destination is gone, and come back when
    # the host sets a different one, as telegram_can_write does.
    Column("slack_id", Text),
    Column("slack_can_write", Boolean, nullable=False, server_default=text("true")),
    Column("teams_webhook_url", Text),
    Column("teams_can_write", Boolean, nullable=False, server_default=text("true")),
    Column("last_seen_at", TZ),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    Column("deleted_at", TZ),
    UniqueConstraint("tenant_id", "external_id"),
    vocab_check("status", vocabulary.PERSON_STATUSES, "status"),
    # Audience pages walk live people of one tenant in id order (R-AUD-5, R-AUD-6).
    Index("person_live_keyset_idx", "tenant_id", "id", postgresql_where=text("deleted_at IS NULL")),
)

role = Table(
    "role",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("code", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("scope_kind", Text, nullable=False),
    Column("permissions", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("is_superadmin", Boolean, nullable=False, server_default=text("false")),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    UniqueConstraint("tenant_id", "code"),
    vocab_check("scope_kind", vocabulary.SCOPE_KINDS, "scope_kind"),
)

person_role = Table(
    "person_role",
    metadata,
    _tenant(),
    Column("person_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("role_id", BigInteger, ForeignKey("role.id", ondelete="CASCADE"), nullable=False),
    _created_at(),
    PrimaryKeyConstraint("person_id", "role_id"),
    Index("person_role_role_id_idx", "role_id", "person_id"),
)

person_group = Table(
    "person_group",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("external_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("kind", Text, nullable=False, server_default="class"),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    Column("deleted_at", TZ),
    UniqueConstraint("tenant_id", "external_id"),
)

group_membership = Table(
    "group_membership",
    metadata,
    _tenant(),
    Column(
        "group_id", BigInteger, ForeignKey("person_group.id", ondelete="CASCADE"), nullable=False
    ),
    Column("person_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("member_role", Text, nullable=False),
    _created_at(),
    Column("deleted_at", TZ),
    PrimaryKeyConstraint("group_id", "person_id"),
    vocab_check("member_role", vocabulary.MEMBER_ROLES, "member_role"),
    Index("group_membership_person_id_idx", "person_id"),
)

guardianship = Table(
    "guardianship",
    metadata,
    _tenant(),
    Column("student_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("guardian_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    _created_at(),
    Column("deleted_at", TZ),
    PrimaryKeyConstraint("student_id", "guardian_id"),
    CheckConstraint("student_id <> guardian_id", name="not_self"),
    Index("guardianship_guardian_id_idx", "guardian_id"),
)

# ---------------------------------------------------------------------------------------------
# Write-time fan-out: event → recipient → delivery (R-SCHEMA-1).

notification_event = Table(
    "notification_event",
    metadata,
    _id(),
    _tenant(),
    _public_id(time_ordered=True),
    Column("kind", Text, nullable=False),
    Column("category", Text, nullable=False),
    Column("priority", Text, nullable=False),
    # A specification, never a list of resolved recipients (R-SCHEMA-54).
    Column("audience", JSONB, nullable=False),
    Column("channels", ARRAY(Text), nullable=False),
    Column("variables", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("action_url", Text),
    # sha256 hex of the dedupe material: always 64 characters (R-DEDUPE-6).
    Column("dedupe_key", String(64), nullable=False),
    Column("request_id", Text),
    Column("scheduled_for", TZ),
    # deliverAt (issue 45, migration 0033): each recipient's own wall-clock time, optionally on
    # one local date; the fan-out turns it into each person's moment (herald.scheduling.clock).
    Column("deliver_local_time", Time),
    Column("deliver_local_date", Date),
    Column("occurred_at", TZ, nullable=False, server_default=NOW),
    _created_at(),
    Column("cancelled_at", TZ),
    Column("cancelled_by", Text),
    # Fan-out claim and completion are separate columns (R-SCHEMA-11, R-FANOUT-4).
    Column("fanout_claimed_at", TZ),
    Column("fanout_claim_token", UUID(as_uuid=True)),
    # The claiming worker's presence key (herald.db.presence): when its advisory lock is gone,
    # the worker is, and the claim is released at once instead of after ten leases.
    Column("fanout_claimed_by", Integer),
    Column("fanout_cursor", BigInteger, nullable=False, server_default=text("0")),
    Column("fanout_completed_at", TZ),
    Column("recipient_count", Integer),
    # Every claim counts; a fan-out that keeps failing stops after a budget and is dead-lettered
    # instead of being retried forever.
    Column("fanout_attempts", Integer, nullable=False, server_default=text("0")),
    Column("fanout_failed_at", TZ),
    # A broadcast's frozen audience (R-BCAST-7, R-BCAST-8): people created after it are left out
    # of this event's fan-out. NULL for every other event.
    Column("audience_frozen_at", TZ),
    # Observability (issue 14): the X-Request-ID of the request that recorded the event and, when
    # tracing is on, its W3C traceparent, so the worker's logs and spans join the request's.
    # (`request_id` above is the caller's idempotency key, a different thing.)
    Column("origin_request_id", Text),
    Column("traceparent", Text),
    UniqueConstraint("tenant_id", "dedupe_key"),
    vocab_check("category", vocabulary.CATEGORIES, "category"),
    vocab_check("priority", vocabulary.PRIORITIES, "priority"),
    # R-SCHEMA-47: the data path guard for the resolver map.
    vocab_check("audience->>'kind'", vocabulary.AUDIENCE_KINDS, "audience_kind"),
    CheckConstraint(
        f"cardinality(channels) > 0 AND channels <@ ARRAY{list(vocabulary.CHANNELS)}::text[]",
        name="channels",
    ),
    # R-SCHEMA-13: a backstop; send() refuses secrets before this is ever reached.
    CheckConstraint(
        "jsonb_typeof(variables) = 'object' AND NOT (variables ?| "
        f"ARRAY{list(vocabulary.FORBIDDEN_VARIABLE_KEYS)}::text[])",
        name="variables_no_secret",
    ),
    CheckConstraint("length(dedupe_key) = 64", name="dedupe_key_hash"),
    CheckConstraint(
        "deliver_local_time IS NOT NULL OR deliver_local_date IS NULL", name="deliver_at_pair"
    ),
    CheckConstraint(
        "deliver_local_time IS NULL OR scheduled_for IS NULL", name="deliver_at_or_scheduled"
    ),
    # Completion and its COUNT move together in one UPDATE (R-FANOUT-9).
    CheckConstraint(
        "(fanout_completed_at IS NULL) = (recipient_count IS NULL)", name="completion_pair"
    ),
    CheckConstraint(
        "(fanout_claimed_at IS NULL) = (fanout_claim_token IS NULL)", name="claim_pair"
    ),
    CheckConstraint(
        "fanout_completed_at IS NULL OR fanout_claimed_at IS NOT NULL", name="completed_after_claim"
    ),
    # An event is cancelled before its fan-out is claimed (R-ADMIN-15), or — a broadcast
    # cancelled while sending — its fan-out is cut short and completed in the same statement.
    CheckConstraint(
        "cancelled_at IS NULL OR fanout_claimed_at IS NULL OR fanout_completed_at IS NOT NULL",
        name="cancelled_before_fanout",
    ),
    CheckConstraint(
        "fanout_failed_at IS NULL OR (fanout_claimed_at IS NOT NULL AND fanout_completed_at IS NULL)",
        name="failed_while_claimed",
    ),
    # What a recipient's key names (event, occurred_at): its month is its event's, provably.
    UniqueConstraint("id", "occurred_at", name="notification_event_id_occurred_at_key"),
    Index("notification_event_occurred_at_idx", "occurred_at"),
    Index("notification_event_tenant_kind_idx", "tenant_id", "kind", "occurred_at"),
    # The admin history list pages by (occurred_at DESC, id DESC) within a tenant.
    Index("notification_event_history_idx", "tenant_id", text("occurred_at DESC"), text("id DESC")),
    # What the fan-out poller scans: unclaimed, not complete, not cancelled (R-PLAT-3).
    Index(
        "notification_event_fanout_due_idx",
        text("coalesce(scheduled_for, created_at)"),
        postgresql_where=text(
            "fanout_claimed_at IS NULL AND fanout_completed_at IS NULL AND cancelled_at IS NULL"
        ),
    ),
    # What the reaper's sweep 3 scans: claimed and not complete.
    Index(
        "notification_event_fanout_claimed_idx",
        "fanout_claimed_at",
        postgresql_where=text("fanout_claimed_at IS NOT NULL AND fanout_completed_at IS NULL"),
    ),
)

notification_recipient = Table(
    "notification_recipient",
    metadata,
    _id(),
    _tenant(),
    _public_id(unique=False, time_ordered=True),
    # Deleted bottom-up by retention, never by cascade from the event (R-RETENTION-5). The key
    # to the event includes occurred_at (below), so a recipient's month is its event's.
    Column("event_id", BigInteger, nullable=False),
    # SET NULL, never CASCADE: proof that a security notice was sent survives erasure (R-SCHEMA-18).
    Column("user_id", BigInteger, ForeignKey("person.id", ondelete="SET NULL")),
    Column("user_public_id_snapshot", UUID(as_uuid=True), nullable=False),
    Column("audience_role_id", BigInteger, ForeignKey("role.id", ondelete="SET NULL")),
    # The audience role's scope kind, copied at fan-out: if the role is later deleted (its id set
    # NULL), a staff-scoped row must stay hidden rather than become visible to everyone.
    Column("audience_scope_kind", Text),
    # The per-recipient overlay on the event's variables (R-SCHEMA-57).
    Column("variables", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("locale", Text, nullable=False, server_default="en"),
    # Copied from the event so the centre pages by one index (same value as e.occurred_at), and
    # the monthly partition key: an event's rows all live in its month.
    _month_key(),
    Column("read_at", TZ),
    _created_at(),
    # A table constraint, not only an index (R-SCHEMA-17). occurred_at is the partition key and
    # fixed per event, so (event, person) stays unique: exactly-once inbox rows hold.
    UniqueConstraint(
        "event_id",
        "user_public_id_snapshot",
        "occurred_at",
        name="notification_recipient_event_user_key",
    ),
    # Unique within a month (version-4 uuids: a collision across months is not a practical case).
    UniqueConstraint("public_id", "occurred_at", name="notification_recipient_public_id_key"),
    # The event and its occurred_at: the partition key cannot differ from the event's, so the
    # (event, person, occurred_at) key above is (event, person) unique (R-SCHEMA-17).
    ForeignKeyConstraint(
        ["event_id", "occurred_at"],
        ["notification_event.id", "notification_event.occurred_at"],
        ondelete="RESTRICT",
        name="notification_recipient_event_id_fkey",
    ),
    vocab_check(
        "audience_scope_kind", vocabulary.SCOPE_KINDS, "audience_scope_kind", nullable=True
    ),
    Index(
        "notification_recipient_centre_idx", "user_id", text("occurred_at DESC"), text("id DESC")
    ),
    # In the page's order, so the unread-only list walks it and stops at the page (0019).
    Index(
        "notification_recipient_unread_idx",
        "user_id",
        text("occurred_at DESC"),
        text("id DESC"),
        postgresql_where=text("read_at IS NULL"),
    ),
    postgresql_partition_by=PARTITION_BY,
)

notification_delivery = Table(
    "notification_delivery",
    metadata,
    _id(),
    _tenant(),
    _public_id(unique=False, time_ordered=True),
    # The recipient, in the same month: the key to it is each month's own (delivery partition →
    # recipient partition, ON DELETE CASCADE), created with the months (herald.db.partitions).
    Column("recipient_id", BigInteger, nullable=False),
    # The recipient's person (its user_id), copied at fan-out so one person's history is one
    # range of notification_delivery_person_idx (0025). No foreign key: it would probe person on
    # every delivery written; erasure nulls it with the recipient's (directory.queries.erasure).
    Column("user_id", BigInteger),
    # The recipient's occurred_at (so the event's): the partition key.
    _month_key(),
    # The event, by (event_id, occurred_at) like the recipient's key (below): every row of an
    # event is in the event's month, which retention's probes rely on to read one month.
    Column("event_id", BigInteger, nullable=False),
    Column("channel", Text, nullable=False),
    # For push: the notification_push_token id. A reference, not a key: a pruned token must not
    # rewrite delivery history.
    Column("provider_target_id", BigInteger),
    Column("replay_of_delivery_id", BigInteger),
    # R-SCHEMA-6: no default other than queued.
    Column("status", Text, nullable=False, server_default="queued"),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("failure_count", Integer, nullable=False, server_default=text("0")),
    Column("lease_expiry_count", Integer, nullable=False, server_default=text("0")),
    Column("queued_at", TZ, nullable=False, server_default=NOW),
    Column("next_attempt_at", TZ, nullable=False, server_default=NOW),
    Column("sent_at", TZ),
    Column("delivered_at", TZ),
    Column("failed_at", TZ),
    Column("skipped_at", TZ),
    Column("dead_at", TZ),
    Column("bounced_at", TZ),
    # A `digested` row: the digest delivery that carried it (no foreign key: retention deletes
    # by event, and the digest's event is another one).
    Column("digest_delivery_id", BigInteger),
    Column("last_error", Text),
    Column("destination_hint", Text),
    Column("rendered_title", Text),
    Column("rendered_body", Text),
    Column("provider_message_id", Text),
    Column("template_version", Integer),
    Column("rendered_hash", String(64)),
    _created_at(),
    vocab_check("channel", vocabulary.CHANNELS, "channel"),
    vocab_check("status", vocabulary.DELIVERY_STATUSES, "status"),
    # A claim is its queue row's (notification_delivery_queue, 0026): the record stays `queued`
    # while a worker holds it, and readers derive `processing` (herald.db.queue).
    # R-SCHEMA-49 / R-SCHEMA-28: skipped status ⇔ skipped_at, as an explicit IN list.
    CheckConstraint(
        f"(status IN {sql_list(vocabulary.SKIPPED_STATUSES)}) = (skipped_at IS NOT NULL)",
        name="skipped_pair",
    ),
    # R-SCHEMA-27: in_app reaches delivered with no send step, so sent_at is scoped by channel.
    CheckConstraint(
        "status NOT IN ('sent', 'delivered') OR channel = 'in_app' OR sent_at IS NOT NULL",
        name="sent_at_when_sent",
    ),
    CheckConstraint("status <> 'dead' OR dead_at IS NOT NULL", name="dead_at_when_dead"),
    CheckConstraint(
        "status <> 'bounced' OR bounced_at IS NOT NULL", name="bounced_at_when_bounced"
    ),
    CheckConstraint(
        "(status = 'digested') = (digest_delivery_id IS NOT NULL)", name="digested_pair"
    ),
    CheckConstraint(
        "attempts >= 0 AND failure_count >= 0 AND lease_expiry_count >= 0", name="counters"
    ),
    UniqueConstraint("public_id", "occurred_at", name="notification_delivery_public_id_key"),
    ForeignKeyConstraint(
        ["event_id", "occurred_at"],
        ["notification_event.id", "notification_event.occurred_at"],
        ondelete="RESTRICT",
        name="notification_delivery_event_id_fkey",
    ),
    Index("notification_delivery_recipient_idx", "recipient_id"),
    # One person's deliveries newest first, in the admin list's page order (queued_at, id): the
    # list walks each month's range and merges them, stopping at the page, never sorting the
    # person's whole history (0024, tests/integration/test_plans_history.py).
    Index("notification_delivery_person_idx", "user_id", text("queued_at DESC"), text("id DESC")),
    Index("notification_delivery_event_id_idx", "event_id", "status"),
    # R-SCHEMA-24/25/50: exact complements, both excluding replays (R-SCHEMA-26).
    Index(
        "notification_delivery_single_target_key",
        "recipient_id",
        "channel",
        "occurred_at",
        unique=True,
        postgresql_where=text("provider_target_id IS NULL AND replay_of_delivery_id IS NULL"),
    ),
    Index(
        "notification_delivery_multi_target_key",
        "recipient_id",
        "channel",
        "provider_target_id",
        "occurred_at",
        unique=True,
        postgresql_where=text("provider_target_id IS NOT NULL AND replay_of_delivery_id IS NULL"),
    ),
    # What sweep 2 re-queues once the backoff has elapsed.
    Index(
        "notification_delivery_failed_due_idx",
        "next_attempt_at",
        postgresql_where=text("status = 'failed'"),
    ),
    # The centre's "a delivered in-app row exists" predicate, as an index-only probe.
    Index(
        "notification_delivery_inbox_idx",
        "recipient_id",
        # With the id, the newest in-app row of a recipient is the end of its range: the list's
        # content probe (ORDER BY id DESC LIMIT 1) needs no sort in any month.
        "id",
        postgresql_where=text("channel = 'in_app' AND status = 'delivered'"),
    ),
    # What backfill re-drives once a provider is configured (R-BACKFILL-2).
    Index(
        "notification_delivery_unconfigured_idx",
        "channel",
        "queued_at",
        postgresql_where=text("status = 'skipped_unconfigured'"),
    ),
    # What the digest sweeper groups: rows waiting for their kind's digest window.
    Index(
        "notification_delivery_held_idx",
        "queued_at",
        postgresql_where=text("status = 'held'"),
    ),
    # A provider's delivery receipt finds its delivery by the provider's message id.
    Index(
        "notification_delivery_provider_message_idx",
        "provider_message_id",
        postgresql_where=text("provider_message_id IS NOT NULL"),
    ),
    postgresql_partition_by=PARTITION_BY,
)

# The delivery queue (migration 0026, docs/scaling.md "The queue table"): one narrow row per
# delivery that is queued — waiting, or claimed by a worker — inserted by the statement that
# makes the delivery queued and deleted by the one that ends it (herald.db.queue). Claims, lease
# renewals and the reaper write only this row, so the wide record is written at fan-out and at
# its outcome and nowhere between, and these indexes hold only the rows in flight whatever the
# history. No foreign key to the delivery: like the attempt's (0023), its check would probe the
# delivery's primary key in every month for every row the fan-out writes, and detaching a month
# would scan this table under ACCESS EXCLUSIVE; the queue row is written only beside its
# delivery, from that statement's own rows, and retention never deletes a queued delivery.
notification_delivery_queue = Table(
    "notification_delivery_queue",
    metadata,
    # The delivery's id (ids are unique across months: one identity for every partition).
    Column("delivery_id", BigInteger, primary_key=True, autoincrement=False),
    _tenant(),
    Column("channel", Text, nullable=False),
    # The delivery's month: every statement of a claimed batch is bounded by its rows' months.
    Column("occurred_at", TZ, nullable=False),
    # When the delivery is next due: the retry timing lives here while the row is queued.
    Column("next_attempt_at", TZ, nullable=False, server_default=NOW),
    # The claim and its lease: set while a worker holds the row (the delivery reads
    # `processing`), and claimed_at is the lease token every later write compares.
    Column("claimed_at", TZ),
    Column("lease_expires_at", TZ),
    # R-SCHEMA-48: a claim and its lease are one pair.
    CheckConstraint("(claimed_at IS NULL) = (lease_expires_at IS NULL)", name="lease_pair"),
    # What the channel workers claim (R-STATE-1), in the claim's exact order (next_attempt_at,
    # delivery_id) within a channel: a range scan that stops after LIMIT rows at any queue depth,
    # tied due times included (0013, 0026, docs/scaling.md).
    Index(
        "notification_delivery_queue_due_idx",
        "channel",
        "next_attempt_at",
        "delivery_id",
        postgresql_where=text("claimed_at IS NULL"),
    ),
    # What the reaper reclaims (R-REAPER-1).
    Index(
        "notification_delivery_queue_lease_idx",
        "lease_expires_at",
        postgresql_where=text("claimed_at IS NOT NULL"),
    ),
)

notification_delivery_attempt = Table(
    "notification_delivery_attempt",
    metadata,
    _id(),
    _tenant(),
    # The delivery, in the same month (each month's own key, as for the delivery's recipient).
    Column("delivery_id", BigInteger, nullable=False),
    # The delivery's occurred_at: the partition key.
    _month_key(),
    # R-STATE-21: only these fields; never a body, an address or a raw response.
    Column("outcome", Text, nullable=False),
    Column("attempt_number", Integer, nullable=False),
    Column("provider_status", Text),
    Column("retry_delay_seconds", Integer),
    Column("error_code", Text),
    Column("provider_message_id", Text),
    _created_at(),
    # The provider that answered (`smtp`, `resend`, `aakash`…), and when a channel lists several,
    # the ones passed over in this attempt as `name:reason`, comma-separated (issue 45). NULL on
    # rows written before 0028.
    Column("provider", Text),
    Column("passed_over", Text),
    vocab_check("outcome", vocabulary.ATTEMPT_OUTCOMES, "outcome"),
    Index("notification_delivery_attempt_delivery_id_idx", "delivery_id"),
    postgresql_partition_by=PARTITION_BY,
)

# ---------------------------------------------------------------------------------------------
# Preferences: absence of a row means the category's code default (R-PREF-10, R-SCHEMA-59).

notification_preference_set = Table(
    "notification_preference_set",
    metadata,
    _tenant(),
    Column("person_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, nullable=False),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    # Quiet hours (issue 45, migration 0033): local wall-clock start and end, [start, end),
    # wrapping past midnight when end < start; in quiet_hours_timezone, else the person's own
    # zone, else HERALD_DEFAULT_TIMEZONE (herald.scheduling.clock). Both or neither.
    Column("quiet_hours_start", Time),
    Column("quiet_hours_end", Time),
    Column("quiet_hours_timezone", Text),
    CheckConstraint("version >= 1", name="version_positive"),
    CheckConstraint(
        "(quiet_hours_start IS NULL AND quiet_hours_end IS NULL) OR (quiet_hours_start IS NOT"
        " NULL AND quiet_hours_end IS NOT NULL AND quiet_hours_start <> quiet_hours_end)",
        name="quiet_hours_pair",
    ),
)

notification_channel_preference = Table(
    "notification_channel_preference",
    metadata,
    _tenant(),
    Column("person_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("channel", Text, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("person_id", "channel"),
    vocab_check("channel", vocabulary.CHANNELS, "channel"),
)

notification_preference = Table(
    "notification_preference",
    metadata,
    _tenant(),
    Column("person_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("category", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("person_id", "category", "channel"),
    # R-SCHEMA-33: only real categories, no sentinel for "all".
    vocab_check("category", vocabulary.CATEGORIES, "category"),
    vocab_check("channel", vocabulary.CHANNELS, "channel"),
)

# ---------------------------------------------------------------------------------------------
# Devices (R-SCHEMA-36..39).

notification_push_token = Table(
    "notification_push_token",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("person_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("token", Text, nullable=False),
    Column("platform", Text, nullable=False),
    Column("is_active", Boolean, nullable=False, server_default=text("true")),
    Column("invalidated_at", TZ),
    Column("invalidation_reason", Text),
    _created_at(),
    Column("last_used_at", TZ, nullable=False, server_default=NOW),
    # A browser's Web Push subscription: `token` is its endpoint URL, these its keys (base64url).
    Column("webpush_p256dh", Text),
    Column("webpush_auth", Text),
    vocab_check("platform", vocabulary.PLATFORMS, "platform"),
    CheckConstraint(
        "(platform = 'webpush') = (webpush_p256dh IS NOT NULL AND webpush_auth IS NOT NULL)",
        name="webpush_keys",
    ),
    vocab_check(
        "invalidation_reason", vocabulary.INVALIDATION_REASONS, "invalidation_reason", nullable=True
    ),
    # R-SCHEMA-38: biconditional, with the cause recorded alongside.
    CheckConstraint("(NOT is_active) = (invalidated_at IS NOT NULL)", name="invalidated_pair"),
    CheckConstraint(
        "(invalidated_at IS NULL) = (invalidation_reason IS NULL)", name="invalidation_reason_pair"
    ),
    # R-SCHEMA-37: unique only among live tokens.
    Index(
        "notification_push_token_active_token_key",
        "tenant_id",
        "token",
        unique=True,
        postgresql_where=text("is_active"),
    ),
    Index("notification_push_token_person_idx", "person_id", postgresql_where=text("is_active")),
    Index(
        "notification_push_token_invalidated_idx",
        "invalidated_at",
        postgresql_where=text("NOT is_active"),
    ),
)

# ---------------------------------------------------------------------------------------------
# Templates: operator overrides only, never seeded (R-SCHEMA-40, R-RENDER-7).

notification_template = Table(
    "notification_template",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("kind", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("locale", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="draft"),
    Column("title", Text),
    Column("body", Text, nullable=False),
    # Incremented by the application; no trigger (R-SCHEMA-41).
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_by", Text),
    Column("updated_by", Text),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    UniqueConstraint("tenant_id", "kind", "channel", "locale"),
    vocab_check("channel", vocabulary.CHANNELS, "channel"),
    vocab_check("status", vocabulary.TEMPLATE_STATUSES, "status"),
    # R-SCHEMA-42: spaces only, so a tab- or newline-only body is still accepted.
    CheckConstraint("btrim(body, ' ') <> ''", name="body_not_blank"),
    CheckConstraint("version >= 1", name="version_positive"),
)

notification_template_version = Table(
    "notification_template_version",
    metadata,
    _id(),
    _tenant(),
    # History outlives the override it recorded.
    Column("template_id", BigInteger, ForeignKey("notification_template.id", ondelete="SET NULL")),
    Column("kind", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("locale", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("status", Text, nullable=False),
    Column("title", Text),
    Column("body", Text, nullable=False),
    Column("created_by", Text),
    _created_at(),
    vocab_check("channel", vocabulary.CHANNELS, "channel"),
    vocab_check("status", vocabulary.TEMPLATE_STATUSES, "status"),
    Index("notification_template_version_template_id_idx", "template_id", "version"),
)

# ---------------------------------------------------------------------------------------------
# Failures (R-SCHEMA-46, R-SCHEMA-51): a reference to the failed work, never the payload.

dead_letter = Table(
    "dead_letter",
    metadata,
    _id(),
    _tenant(),
    _public_id(time_ordered=True),
    Column("queue_name", Text, nullable=False),
    Column("job_name", Text, nullable=False),
    Column("job_id", Text, nullable=False),
    Column("payload_ref", JSONB, nullable=False),
    Column("actor_id", Text),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text),
    Column("failed_at", TZ, nullable=False, server_default=NOW),
    Column("replayed_at", TZ),
    Column("replayed_by", Text),
    Column("replay_job_id", Text),
    _created_at(),
    CheckConstraint(
        "jsonb_typeof(payload_ref) = 'object' AND "
        "NOT jsonb_path_exists(payload_ref, '$.* ? (@.type() != \"string\")')",
        name="payload_ref_strings",
    ),
    CheckConstraint("(replayed_at IS NULL) = (replayed_by IS NULL)", name="replay_pair"),
    Index("dead_letter_queue_failed_idx", "tenant_id", "queue_name", text("failed_at DESC")),
    # Retention asks "is this delivery awaiting replay?" for every aged delivery (R-RETENTION-4).
    Index(
        "dead_letter_unreplayed_delivery_idx",
        text("(payload_ref ->> 'notificationDeliveryPublicId')"),
        postgresql_where=text("replayed_at IS NULL"),
    ),
)

# ---------------------------------------------------------------------------------------------
# Access.

api_key = Table(
    "api_key",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("name", Text, nullable=False),
    Column("prefix", Text, nullable=False),
    # sha256 of the key; the key itself is shown once and never stored.
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("scopes", ARRAY(Text), nullable=False),
    _created_at(),
    Column("last_used_at", TZ),
    Column("revoked_at", TZ),
    CheckConstraint(f"scopes <@ ARRAY{[*vocabulary.API_SCOPES, '*']}::text[]", name="scopes"),
)

# ---------------------------------------------------------------------------------------------
# The embedded secret vault (used when HERALD_REDIS_URL is unset): UNLOGGED, so its rows never
# reach the WAL or a replica; encrypted with a key that lives outside the database; every read
# deletes (R-SECRET-9); rows expire on their own (R-SECRET-8).

secret_vault = Table(
    "secret_vault",
    metadata,
    Column("ref_id", Text, primary_key=True),
    _tenant(),
    Column("ciphertext", LargeBinary, nullable=False),
    _created_at(),
    Column("expires_at", TZ, nullable=False),
    # The delivery that claimed the entry: it alone may read it again until its outcome is
    # recorded and the entry released (a read whose answer was lost must be safe to repeat).
    Column("holder", Text),
    Index("secret_vault_expires_at_idx", "expires_at"),
    prefixes=["UNLOGGED"],
)

# ---------------------------------------------------------------------------------------------
# Audit of operator mutations (R-ADMIN-6..8): who, what, and per-field before/after values.

audit_record = Table(
    "audit_record",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("actor_kind", Text, nullable=False),
    Column("actor_id", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("entity_type", Text, nullable=False),
    Column("entity_id", Text, nullable=False),
    # {"field": {"before": …, "after": …}} for updates; the created/deleted values otherwise.
    Column("changes", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    _created_at(),
    vocab_check("actor_kind", vocabulary.ACTOR_KINDS, "actor_kind"),
    vocab_check("action", vocabulary.AUDIT_ACTIONS, "action"),
    Index("audit_record_entity_idx", "tenant_id", "entity_type", "entity_id", "id"),
    Index("audit_record_created_idx", "tenant_id", "created_at"),
)

# ---------------------------------------------------------------------------------------------
# Read-time fan-out: the operations feed (R-SCHEMA-1, R-SCHEMA-2, R-SCHEMA-43..45, R-SCHEMA-60).
# No key or join to the write-time tables.

feed_notification = Table(
    "feed_notification",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("kind", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("body", Text),
    Column("link", Text),
    # The permission a viewer's active role must hold to see this row.
    Column("permission_code", Text, nullable=False),
    Column("occurred_at", TZ, nullable=False, server_default=NOW),
    _created_at(),
    Index("feed_notification_list_idx", "tenant_id", text("occurred_at DESC"), text("id DESC")),
    Index("feed_notification_permission_idx", "tenant_id", "permission_code"),
    Index("feed_notification_occurred_at_idx", "occurred_at"),
)

feed_notification_read = Table(
    "feed_notification_read",
    metadata,
    Column(
        "notification_id",
        BigInteger,
        ForeignKey("feed_notification.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("user_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("read_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("notification_id", "user_id"),
    Index("feed_notification_read_user_idx", "user_id"),
)

# ---------------------------------------------------------------------------------------------
# Operational email (R-OPMAIL-*): alerts to the fixed support mailbox, rendered at enqueue,
# retried on their own budget; no event, recipient or delivery rows.

operational_email = Table(
    "operational_email",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("aggregate_type", Text),
    Column("aggregate_id", Text),
    Column("event_type", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("body_text", Text, nullable=False),
    Column("body_html", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="queued"),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", TZ, nullable=False, server_default=NOW),
    Column("claimed_at", TZ),
    Column("lease_expires_at", TZ),
    Column("sent_at", TZ),
    Column("last_error", Text),
    _created_at(),
    vocab_check("status", vocabulary.OPERATIONAL_EMAIL_STATUSES, "status"),
    CheckConstraint("(claimed_at IS NULL) = (lease_expires_at IS NULL)", name="lease_pair"),
    CheckConstraint(
        "(status = 'processing') = (claimed_at IS NOT NULL)", name="claim_while_processing"
    ),
    # In the claim's order (next_attempt_at, id): a range scan that stops after LIMIT (0013).
    Index(
        "operational_email_due_idx",
        "next_attempt_at",
        "id",
        postgresql_where=text("status = 'queued'"),
    ),
    Index(
        "operational_email_lease_idx",
        "lease_expires_at",
        postgresql_where=text("status = 'processing'"),
    ),
)

# ---------------------------------------------------------------------------------------------
# Once-per-period maintenance tasks (the SMS credit check's day key, R-CREDIT-1/6): a
# compare-and-set on the last key run, so any number of workers run a task once per period.

maintenance_run = Table(
    "maintenance_run",
    metadata,
    Column("task", Text, primary_key=True),
    Column("period_key", Text, nullable=False),
    Column("ran_at", TZ, nullable=False, server_default=NOW),
)

# ---------------------------------------------------------------------------------------------
# Scheduling (DESIGN.md §5.2): the scheduler's lease, reminder schedules and their runs.

# The lease that makes one of several `herald scheduler` processes the one that fires (R-OPS-13):
# acquired and renewed by one conditional upsert, taken over once it has expired. `tenant_id`
# is the scope the lease covers; the reminder cycle covers every tenant and uses '*'.
scheduler_lease = Table(
    "scheduler_lease",
    metadata,
    _tenant(),
    Column("name", Text, nullable=False),
    Column("holder", Text, nullable=False),
    Column("acquired_at", TZ, nullable=False, server_default=NOW),
    Column("expires_at", TZ, nullable=False),
    PrimaryKeyConstraint("tenant_id", "name"),
)

reminder_schedule = Table(
    "reminder_schedule",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("name", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("variables", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # NULL: the kind's channels at each occurrence.
    Column("channels", ARRAY(Text)),
    # An audience specification, validated exactly as send() validates one.
    Column("audience", JSONB, nullable=False),
    # An IANA zone name, a local `HH:MM` and ISO weekdays (R-REMIND-1..3).
    Column("timezone", Text, nullable=False),
    Column("local_time", Text, nullable=False),
    Column("weekdays", ARRAY(Integer), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    # The next occurrence, the deterministic boundary of the cycle (R-REMIND-5): the scheduler
    # claims it by moving it forward with a compare-and-set. NULL while disabled.
    Column("next_run_at", TZ),
    # Incremented by the application on every change (compare-and-set on the version read).
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("created_by", Text),
    Column("updated_by", Text),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint("btrim(name) <> ''", name="name_not_blank"),
    CheckConstraint("local_time ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'", name="local_time_format"),
    CheckConstraint(
        "cardinality(weekdays) BETWEEN 1 AND 7 AND weekdays <@ ARRAY[1, 2, 3, 4, 5, 6, 7]",
        name="weekdays_iso",
    ),
    CheckConstraint(
        "channels IS NULL OR (cardinality(channels) > 0 AND "
        f"channels <@ ARRAY{list(vocabulary.CHANNELS)}::text[])",
        name="channels",
    ),
    vocab_check("audience->>'kind'", vocabulary.AUDIENCE_KINDS, "audience_kind"),
    CheckConstraint("jsonb_typeof(variables) = 'object'", name="variables_object"),
    CheckConstraint("enabled OR next_run_at IS NULL", name="disabled_not_due"),
    CheckConstraint("version >= 1", name="version_positive"),
    # The scheduler's due scan: enabled schedules by next occurrence.
    Index(
        "reminder_schedule_due_idx",
        "next_run_at",
        postgresql_where=text("enabled AND next_run_at IS NOT NULL"),
    ),
    Index("reminder_schedule_tenant_idx", "tenant_id", "id"),
)

# One row per occurrence the scheduler dealt with: fired (with its event), missed or failed.
reminder_run = Table(
    "reminder_run",
    metadata,
    _id(),
    _tenant(),
    Column(
        "schedule_id",
        BigInteger,
        ForeignKey("reminder_schedule.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("occurrence", TZ, nullable=False),
    Column("state", Text, nullable=False),
    # The event a fired occurrence recorded (its public id; retention may delete the event
    # first, so no foreign key).
    Column("event_public_id", UUID(as_uuid=True)),
    # Why a failed occurrence could not be recorded: an error code, never a payload.
    Column("error_code", Text),
    _created_at(),
    UniqueConstraint("schedule_id", "occurrence"),
    vocab_check("state", vocabulary.REMINDER_RUN_STATES, "state"),
    CheckConstraint("(state = 'fired') = (event_public_id IS NOT NULL)", name="event_when_fired"),
    CheckConstraint("(state = 'failed') = (error_code IS NOT NULL)", name="error_when_failed"),
    # Retention ages runs by created_at.
    Index("reminder_run_created_at_idx", "created_at"),
)

# ---------------------------------------------------------------------------------------------
# Broadcasts (seed 003, DESIGN.md §5.2): drafted by one operator, approved by another, released
# by the scheduler as one ordinary event with a frozen audience.

broadcast = Table(
    "broadcast",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("title", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("variables", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # NULL: the kind's channels.
    Column("channels", ARRAY(Text)),
    Column("audience", JSONB, nullable=False),
    # NULL: released at approval (the scheduler's next tick).
    Column("scheduled_for", TZ),
    Column("state", Text, nullable=False, server_default="draft"),
    # Incremented by the application on every operator change (compare-and-set on the version read).
    Column("version", Integer, nullable=False, server_default=text("1")),
    # `person:<external id>` or `api_key:<key id>` (audit.actor_label).
    Column("created_by", Text, nullable=False),
    Column("updated_by", Text),
    Column("approved_by", Text),
    Column("approved_at", TZ),
    # Frozen by the scheduler before the event is recorded (R-BCAST-7).
    Column("audience_frozen_at", TZ),
    # The released event (SET NULL: retention may delete the event before the broadcast).
    Column("event_id", BigInteger, ForeignKey("notification_event.id", ondelete="SET NULL")),
    Column("event_public_id", UUID(as_uuid=True)),
    Column("cancelled_at", TZ),
    Column("cancelled_by", Text),
    Column("completed_at", TZ),
    # Its event's fan-out gave up (dead-lettered) and nothing it wrote is in flight any more.
    Column("failed_at", TZ),
    # Nothing of the broadcast is left in flight: set with completion, with a cancel before
    # release, or once a cancelled release has no unclaimed or in-flight delivery left.
    Column("settled_at", TZ),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    vocab_check("state", vocabulary.BROADCAST_STATES, "state"),
    # R-BCAST-5: two different people, whatever the code does.
    CheckConstraint(
        "approved_by IS NULL OR approved_by <> created_by", name="approver_not_creator"
    ),
    # Approval needs a person (an operator's JWT), never an API key.
    CheckConstraint(
        "approved_by IS NULL OR starts_with(approved_by, 'person:')", name="approver_is_person"
    ),
    CheckConstraint("(approved_by IS NULL) = (approved_at IS NULL)", name="approval_pair"),
    CheckConstraint(
        "state IN ('draft', 'cancelled') OR approved_by IS NOT NULL", name="approved_to_release"
    ),
    CheckConstraint(
        "state NOT IN ('sending', 'completed', 'failed') OR audience_frozen_at IS NOT NULL",
        name="frozen_when_released",
    ),
    CheckConstraint("(state = 'cancelled') = (cancelled_at IS NOT NULL)", name="cancel_pair"),
    CheckConstraint("(state = 'completed') = (completed_at IS NOT NULL)", name="completion_pair"),
    CheckConstraint("(state = 'failed') = (failed_at IS NOT NULL)", name="failure_pair"),
    CheckConstraint("btrim(title) <> ''", name="title_not_blank"),
    CheckConstraint(
        "channels IS NULL OR (cardinality(channels) > 0 AND "
        f"channels <@ ARRAY{list(vocabulary.CHANNELS)}::text[])",
        name="channels",
    ),
    vocab_check("audience->>'kind'", vocabulary.AUDIENCE_KINDS, "audience_kind"),
    CheckConstraint("jsonb_typeof(variables) = 'object'", name="variables_object"),
    CheckConstraint("version >= 1", name="version_positive"),
    Index("broadcast_tenant_idx", "tenant_id", "id"),
    # The scheduler's scans: approved broadcasts by release time, and released or cancelled
    # ones still to settle.
    Index(
        "broadcast_due_idx",
        text("coalesce(scheduled_for, approved_at)"),
        postgresql_where=text("state = 'approved'"),
    ),
    Index(
        "broadcast_unsettled_idx",
        "id",
        postgresql_where=text("state IN ('sending', 'cancelled') AND settled_at IS NULL"),
    ),
    Index("broadcast_settled_at_idx", "settled_at"),
    Index("broadcast_event_id_idx", "event_id"),
)

# ---------------------------------------------------------------------------------------------
# Follow-ups (DESIGN.md §5.2, seed 004): notify at armAt, remind once at escalateAt, unless
# acknowledged. The sweep moves a row armed → notified → follow_up, each step one conditional
# UPDATE committed with the event it records.

followup = Table(
    "followup",
    metadata,
    _id(),
    _tenant(),
    # The host's own name for the thing being followed up (e.g. "absence:2026-09-01:stu-42").
    Column("key", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("reminder_kind", Text, nullable=False),
    # An audience specification, validated exactly as send() validates one: people only.
    Column("audience", JSONB, nullable=False),
    Column("variables", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Kept so a reopen re-arms with the grace (and delay) the follow-up was armed with.
    Column("grace_seconds", Integer, nullable=False),
    Column("reminder_delay_seconds", Integer, nullable=False),
    Column("state", Text, nullable=False),
    # Bumped by every reopen: a new cycle's events are new events (R-FOLLOW-14).
    Column("cycle", Integer, nullable=False, server_default=text("1")),
    Column("arm_at", TZ),
    Column("notified_at", TZ),
    Column("escalate_at", TZ),
    Column("reminded_at", TZ),
    # The events the two transitions recorded (public ids; retention may delete the events
    # first, so no foreign key).
    Column("notify_event_id", UUID(as_uuid=True)),
    Column("reminder_event_id", UUID(as_uuid=True)),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    UniqueConstraint("tenant_id", "key"),
    vocab_check("state", vocabulary.FOLLOWUP_STATES, "state"),
    vocab_check("audience->>'kind'", vocabulary.AUDIENCE_KINDS, "audience_kind"),
    CheckConstraint("jsonb_typeof(variables) = 'object'", name="variables_object"),
    CheckConstraint("btrim(key) <> '' AND length(key) <= 200", name="key_shape"),
    CheckConstraint(
        "grace_seconds >= 0 AND reminder_delay_seconds >= 0", name="delays_not_negative"
    ),
    CheckConstraint("cycle >= 1", name="cycle_positive"),
    # What each claim predicate reads is there in the state that claim expects.
    CheckConstraint("state <> 'armed' OR arm_at IS NOT NULL", name="armed_has_arm_at"),
    CheckConstraint(
        "state <> 'notified' OR (notified_at IS NOT NULL AND escalate_at IS NOT NULL)",
        name="notified_has_escalate_at",
    ),
    CheckConstraint("state <> 'follow_up' OR reminded_at IS NOT NULL", name="follow_up_reminded"),
    # R-FOLLOW-2: the two candidate scans, exactly.
    Index("followup_notify_due_idx", "tenant_id", "state", "arm_at"),
    Index("followup_remind_due_idx", "tenant_id", "state", "escalate_at"),
    # Retention ages resolved rows by updated_at.
    Index("followup_updated_at_idx", "updated_at"),
)

# ---------------------------------------------------------------------------------------------
# Channel escalation (issue 45, migration 0034, docs/escalation.md): one row per later step of a
# kind's plan per recipient, written by the fan-out in the statement that writes the in-app row,
# decided once by the scheduler in the transaction that writes the step's delivery.
notification_escalation_step = Table(
    "notification_escalation_step",
    metadata,
    _id(),
    _tenant(),
    # The recipient and its month (no foreign key into the partitioned tables: the fan-out
    # writes the step from the recipient row it has just written, and retention deletes the
    # decided steps by age).
    Column("event_id", BigInteger, nullable=False),
    Column("recipient_id", BigInteger, nullable=False),
    Column("occurred_at", TZ, nullable=False),
    # The recipient's person (erasure deletes its steps); NULL once the person is gone.
    Column("person_id", BigInteger),
    # The event's category and whether preferences may suppress the kind, copied at fan-out so
    # the decision reads the step, the recipient and two preference rows only.
    Column("category", Text, nullable=False),
    Column("suppressible", Boolean, nullable=False),
    Column("step_index", Integer, nullable=False),
    Column("channel", Text, nullable=False),
    # Fixed at fan-out: each step's delay after the previous step's due time.
    Column("due_at", TZ, nullable=False),
    Column("state", Text, nullable=False, server_default="pending"),
    Column("reason", Text),
    Column("decided_at", TZ),
    # The delivery the step wrote (state sent).
    Column("delivery_id", BigInteger),
    _created_at(),
    # One row per (recipient, step): a redelivered fan-out page writes no step twice.
    UniqueConstraint("recipient_id", "step_index"),
    vocab_check("state", vocabulary.ESCALATION_STEP_STATES, "state"),
    vocab_check("reason", vocabulary.ESCALATION_REASONS, "reason", nullable=True),
    vocab_check("channel", vocabulary.REMOTE_CHANNELS, "channel"),
    CheckConstraint("step_index >= 1", name="step_index_positive"),
    CheckConstraint("(state = 'pending') = (decided_at IS NULL)", name="decided_pair"),
    # What the scheduler claims, in the claim's order: a range scan that stops at its LIMIT
    # however many steps are pending (docs/escalation.md, bench/escalation.py).
    Index(
        "notification_escalation_step_due_idx",
        "due_at",
        "id",
        postgresql_where=text("state = 'pending'"),
    ),
    # Retention ages decided steps out; erasure finds a person's steps.
    Index(
        "notification_escalation_step_decided_idx",
        "decided_at",
        postgresql_where=text("state <> 'pending'"),
    ),
    Index("notification_escalation_step_person_idx", "person_id"),
    Index("notification_escalation_step_event_idx", "event_id"),
)

# A tenant's delays for a kind's escalation plan (PUT /v1/admin/kinds/{kind}/escalation): the
# code's plan is the fallback, and `delays` NULL is a reverted override (the row keeps counting
# versions). Versioned like template overrides: every change bumps `version` under the row's
# lock and appends a version row, which is never updated.
notification_escalation_override = Table(
    "notification_escalation_override",
    metadata,
    _id(),
    _tenant(),
    Column("kind", Text, nullable=False),
    # Seconds after the previous step's due time, one per step of the code's plan, in order.
    Column("delays", ARRAY(Integer)),
    Column("version", Integer, nullable=False),
    Column("updated_by", Text, nullable=False),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    UniqueConstraint("tenant_id", "kind"),
    CheckConstraint("version >= 1", name="version_positive"),
    CheckConstraint(
        "delays IS NULL OR (cardinality(delays) >= 1 AND 0 < ALL (delays) "
        "AND 2592000 >= ALL (delays))",
        name="delays_in_range",
    ),
)

notification_escalation_override_version = Table(
    "notification_escalation_override_version",
    metadata,
    _id(),
    _tenant(),
    Column("kind", Text, nullable=False),
    Column("version", Integer, nullable=False),
    # NULL: this version reverted to the code's plan.
    Column("delays", ARRAY(Integer)),
    Column("actor", Text, nullable=False),
    _created_at(),
    UniqueConstraint(
        "tenant_id", "kind", "version", name="notification_escalation_override_version_key"
    ),
)

# ---------------------------------------------------------------------------------------------
# Outbound webhooks to the host (issue 16). An endpoint's signing secret must be readable to
# sign, so it is stored Fernet-encrypted with the vault key, which lives outside the database.

# ---------------------------------------------------------------------------------------------
# A tenant's own provider accounts (issue 46, herald.admin.providers): the fields of one provider
# the tenant overrides. Plain fields in `settings`; secret ones (passwords, API keys, tokens)
# only in `secret_ciphertext`, a Fernet token under the vault key, which never lives here.
# `version` rises on every change: the workers' cache of built providers compares it.

notification_provider_account = Table(
    "notification_provider_account",
    metadata,
    _id(),
    _tenant(),
    Column("provider", Text, nullable=False),
    Column("settings", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("secret_ciphertext", LargeBinary),
    Column("version", Integer, nullable=False, server_default=text("1")),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    Column("updated_by", Text, nullable=False),
    vocab_check("provider", vocabulary.ACCOUNT_PROVIDERS, "provider"),
    UniqueConstraint("tenant_id", "provider"),
)

webhook_endpoint = Table(
    "webhook_endpoint",
    metadata,
    _id(),
    _tenant(),
    _public_id(),
    Column("url", Text, nullable=False),
    Column("event_types", ARRAY(Text), nullable=False),
    Column("description", Text),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("secret_ciphertext", LargeBinary, nullable=False),
    _created_at(),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint(
        f"event_types <@ ARRAY{list(vocabulary.WEBHOOK_EVENT_TYPES)}::text[]", name="event_types"
    ),
    CheckConstraint("length(url) <= 2000", name="url_length"),
    Index("webhook_endpoint_tenant_id_idx", "tenant_id"),
)

webhook_message = Table(
    "webhook_message",
    metadata,
    _id(),
    _tenant(),
    # Also the `webhook-id` header: the same across every attempt and a replay, so the host can
    # drop a second copy (Standard Webhooks).
    _public_id(time_ordered=True),
    Column(
        "endpoint_id",
        BigInteger,
        ForeignKey("webhook_endpoint.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("event_type", Text, nullable=False),
    # Ids and statuses only: never content, never an address.
    Column("payload", JSONB, nullable=False),
    Column("status", Text, nullable=False, server_default="queued"),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", TZ, nullable=False, server_default=NOW),
    Column("claimed_at", TZ),
    Column("lease_expires_at", TZ),
    Column("sent_at", TZ),
    Column("dead_at", TZ),
    Column("last_error", Text),
    Column("response_status", Integer),
    _created_at(),
    vocab_check("status", vocabulary.WEBHOOK_MESSAGE_STATUSES, "status"),
    vocab_check(
        "event_type", (*vocabulary.WEBHOOK_EVENT_TYPES, vocabulary.WEBHOOK_TEST_EVENT), "event_type"
    ),
    CheckConstraint("(claimed_at IS NULL) = (lease_expires_at IS NULL)", name="lease_pair"),
    CheckConstraint(
        "(status = 'processing') = (claimed_at IS NOT NULL)", name="claim_while_processing"
    ),
    CheckConstraint("status <> 'sent' OR sent_at IS NOT NULL", name="sent_at_when_sent"),
    CheckConstraint("status <> 'dead' OR dead_at IS NOT NULL", name="dead_at_when_dead"),
    CheckConstraint("jsonb_typeof(payload) = 'object'", name="payload_object"),
    Index("webhook_message_endpoint_id_idx", "endpoint_id"),
    # What the webhook sender claims.
    Index("webhook_message_due_idx", "next_attempt_at", postgresql_where=text("status = 'queued'")),
    # What the sender reclaims when a worker died holding a message.
    Index(
        "webhook_message_lease_idx",
        "lease_expires_at",
        postgresql_where=text("status = 'processing'"),
    ),
    # Retention ages sent messages by created_at.
    Index("webhook_message_sent_idx", "created_at", postgresql_where=text("status = 'sent'")),
)

# An address a provider reported permanently undeliverable (an email hard bounce): later sends to
# it are skipped_no_destination until the host changes the address. Only a hash of the address
# is kept (sha256 of the trimmed, lower-cased address), never the address.
undeliverable_address = Table(
    "undeliverable_address",
    metadata,
    _id(),
    _tenant(),
    Column("channel", Text, nullable=False),
    Column("address_hash", String(64), nullable=False),
    Column("reason", Text, nullable=False),
    # The delivery whose receipt marked it (no foreign key: retention may delete it first).
    Column("delivery_public_id", UUID(as_uuid=True)),
    _created_at(),
    UniqueConstraint("tenant_id", "channel", "address_hash"),
    vocab_check("channel", vocabulary.UNDELIVERABLE_CHANNELS, "channel"),
    Index("undeliverable_address_created_at_idx", "created_at"),
)

# Receipts that arrived before their send was recorded (issue 44). A fast provider can post a
# status callback while the recorder is still writing the provider's message id; Twilio does not
# send a callback twice, so it is kept here and applied, once, by the recorder's transaction that
# stores that message id (herald.receipts.service.apply_parked), which deletes it. No tenant_id:
# until a delivery carries the message id the receipt belongs to no tenant, so row-level security
# scopes it through that delivery (tenancy.PARENT_SCOPED), keeping the receipt route's rule (the
# tenant is the one whose delivery carries the id). Only what applying it needs is kept: the
# Herald status and code, the provider's status word, never a number or a body. Retention deletes
# what no send claimed within PENDING_RECEIPT_DAYS.
pending_receipt = Table(
    "pending_receipt",
    metadata,
    _id(),
    Column("provider", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("provider_message_id", Text, nullable=False),
    # What applying it does to the delivery: `delivered` or `bounced` (with `code`, and `hard`
    # when it also marks the number undeliverable).
    Column("status", Text, nullable=False),
    Column("code", Text),
    Column("hard", Boolean, nullable=False, server_default=text("false")),
    # The provider's own word for it (Twilio's MessageStatus), for the operator reading the row.
    Column("provider_status", Text, nullable=False),
    Column("received_at", TZ, nullable=False, server_default=NOW),
    # A duplicate callback adds nothing; the recorder takes the rows by (channel, id).
    UniqueConstraint("channel", "provider_message_id", "status"),
    vocab_check("provider", vocabulary.PARKED_RECEIPT_PROVIDERS, "provider"),
    vocab_check("channel", vocabulary.PARKED_RECEIPT_CHANNELS, "channel"),
    CheckConstraint("status IN ('delivered', 'bounced')", name="status"),
    Index("pending_receipt_received_at_idx", "received_at"),
)

# Console sessions (issue 13): an operator's JWT exchanged for a server-side session. The cookie
# carries a random token; only its sha256 is stored, so a read of this table signs nobody in.
# The person's active role is kept by code, and the role's permissions are read afresh on every
# request: the session grants nothing the directory does not. Erasure removes a person's sessions
# with the person (CASCADE); retention deletes expired ones; sign-out deletes its row.

console_session = Table(
    "console_session",
    metadata,
    _id(),
    _tenant(),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("person_id", BigInteger, ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
    Column("role_code", Text),
    _created_at(),
    Column("expires_at", TZ, nullable=False),
    CheckConstraint("length(token_hash) = 64", name="token_hash_sha256"),
    CheckConstraint("expires_at > created_at", name="expires_after_created"),
    Index("console_session_expires_at_idx", "expires_at"),
    Index("console_session_person_id_idx", "person_id"),
)
