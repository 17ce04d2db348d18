"""The one list every CHECK constraint, API enum and worker branch is generated from.

R-SCHEMA-3/R-SCHEMA-4: three consumers (schema, API, workers) need identical lists, so they all
import these tuples; the schema builds its CHECK constraints from them and a test compares the
database's constraints with them.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Channel = Literal["in_app", "email", "sms", "push", "telegram", "slack", "teams", "whatsapp"]
CHANNELS: Final[tuple[str, ...]] = get_args(Channel)
REMOTE_CHANNELS: Final[tuple[str, ...]] = tuple(c for c in CHANNELS if c != "in_app")

Category = Literal[
    "security",
    "account",
    "announcement",
    "academic",
    "attendance",
    "finance",
    "events",
    "transport",
    "system",
]
CATEGORIES: Final[tuple[str, ...]] = get_args(Category)
# Only these categories may hold a kind that no preference can switch off.
UNSUPPRESSIBLE_CATEGORIES: Final[tuple[str, ...]] = ("security", "account")

Priority = Literal["low", "normal", "high", "urgent"]
PRIORITIES: Final[tuple[str, ...]] = get_args(Priority)

# R-SCHEMA-6: no `created`; a delivery row does not exist before it is queued.
SKIPPED_STATUSES: Final[tuple[str, ...]] = (
    "skipped_preference",
    "skipped_no_template",
    "skipped_no_destination",
    "skipped_unconfigured",
    "skipped_recipient_gone",
    "skipped_throttled",
)
DeliveryStatus = Literal[
    "queued",
    # Published, not stored: a queued delivery whose queue row carries a worker's claim
    # (herald.db.queue); the record itself stays queued.
    "processing",
    "sent",
    "delivered",
    # Final: the provider reported the message undeliverable after accepting it (an email hard
    # bounce, an SMS undelivered); last_error carries the provider's code.
    "bounced",
    "failed",
    "dead",
    "cancelled",
    "skipped_preference",
    "skipped_no_template",
    "skipped_no_destination",
    "skipped_unconfigured",
    "skipped_recipient_gone",
    # Digests (issue 16): `held` waits for its kind's digest window; `digested` is final, carried
    # by the digest delivery named in digest_delivery_id.
    "held",
    "digested",
    # Throttle (issue 16): past the per-person, per-category cap on a paid channel.
    "skipped_throttled",
]
DELIVERY_STATUSES: Final[tuple[str, ...]] = get_args(DeliveryStatus)
# Statuses in which a delivery still has work ahead of it (retention never touches these).
IN_FLIGHT_STATUSES: Final[tuple[str, ...]] = ("queued", "processing", "failed", "held")

AudienceKind = Literal[
    "users",
    "role",
    "group",
    "guardians_of_group",
    "guardians_of_users",
    "all_users",
    "segment",
    "compound",
]
AUDIENCE_KINDS: Final[tuple[str, ...]] = get_args(AudienceKind)
# Kinds that name people explicitly and are capped at MAX_EXPLICIT_RECIPIENTS.
EXPLICIT_AUDIENCE_KINDS: Final[tuple[str, ...]] = ("users", "guardians_of_users")

Platform = Literal["android", "ios", "web", "webpush"]
PLATFORMS: Final[tuple[str, ...]] = get_args(Platform)

InvalidationReason = Literal["replaced", "unregistered", "user_logout", "invalid", "limit"]
INVALIDATION_REASONS: Final[tuple[str, ...]] = get_args(InvalidationReason)

DedupePolicy = Literal["collapse", "repeatable"]
DEDUPE_POLICIES: Final[tuple[str, ...]] = get_args(DedupePolicy)

PersonStatus = Literal["active", "limited", "suspended"]
PERSON_STATUSES: Final[tuple[str, ...]] = get_args(PersonStatus)

ScopeKind = Literal["staff", "guardian", "student"]
SCOPE_KINDS: Final[tuple[str, ...]] = get_args(ScopeKind)

MemberRole = Literal["student", "teacher"]
MEMBER_ROLES: Final[tuple[str, ...]] = get_args(MemberRole)

TemplateStatus = Literal["draft", "published", "archived"]
TEMPLATE_STATUSES: Final[tuple[str, ...]] = get_args(TemplateStatus)

AttemptOutcome = Literal["sent", "failed", "dead", "skipped"]
ATTEMPT_OUTCOMES: Final[tuple[str, ...]] = get_args(AttemptOutcome)

OperationalEmailStatus = Literal["queued", "processing", "sent", "skipped", "dead"]
OPERATIONAL_EMAIL_STATUSES: Final[tuple[str, ...]] = get_args(OperationalEmailStatus)

AuditAction = Literal[
    "create",
    "update",
    "delete",
    "publish",
    "archive",
    "restore",
    "replay",
    "cancel",
    "erase",
    "approve",
    "release",
    "complete",
]
AUDIT_ACTIONS: Final[tuple[str, ...]] = get_args(AuditAction)

ActorKind = Literal["api_key", "person", "system"]
ACTOR_KINDS: Final[tuple[str, ...]] = get_args(ActorKind)

# The permission catalogue (R-SEC-3): one module per admin surface, five verbs each. None is superadmin-only
# (R-SEC-4).
PERMISSION_MODULES: Final[tuple[str, ...]] = (
    "NotificationTemplate",
    "NotificationHistory",
    "NotificationFailure",
    "NotificationReminder",
    "NotificationWebhook",
)
PERMISSION_VERBS: Final[tuple[str, ...]] = ("CREATE", "READ", "UPDATE", "DELETE", "RESTORE")
# Broadcasts have their own verbs: APPROVE is the second person's (DESIGN.md §5.2), and a
# broadcast is never restored.
BROADCAST_PERMISSIONS: Final[tuple[str, ...]] = tuple(
    f"NotificationBroadcast_{verb}" for verb in ("CREATE", "READ", "UPDATE", "DELETE", "APPROVE")
)
# A tenant's provider accounts (herald.admin.providers): reading them (secrets shown only as set
# or not) and changing them are the two things an operator may be allowed.
PROVIDER_PERMISSIONS: Final[tuple[str, ...]] = (
    "NotificationProvider_READ",
    "NotificationProvider_WRITE",
)
PERMISSIONS: Final[tuple[str, ...]] = (
    *(f"{module}_{verb}" for module in PERMISSION_MODULES for verb in PERMISSION_VERBS),
    *BROADCAST_PERMISSIONS,
    *PROVIDER_PERMISSIONS,
)

# The providers a tenant may hold its own account for (herald.channels.accounts).
AccountProvider = Literal[
    "smtp", "resend", "twilio", "aakash", "telegram", "slack", "fcm", "webpush", "whatsapp"
]
ACCOUNT_PROVIDERS: Final[tuple[str, ...]] = get_args(AccountProvider)

# What became of one occurrence of a reminder schedule: `fired` recorded its event, `missed`
# was too late when the scheduler reached it (HERALD_REMINDER_MAX_LATENESS_MINUTES), `failed`
# could not be recorded (its kind or audience no longer passes the send path's checks).
ReminderRunState = Literal["fired", "missed", "failed"]
REMINDER_RUN_STATES: Final[tuple[str, ...]] = get_args(ReminderRunState)

# A broadcast's life (DESIGN.md §5.2): draft → approved → sending → completed, and cancelled
# from any state but completed. `failed`: its event's fan-out gave up (dead-lettered) and what it
# had written is no longer in flight — final, like completed, and settled.
BroadcastState = Literal["draft", "approved", "sending", "completed", "cancelled", "failed"]
BROADCAST_STATES: Final[tuple[str, ...]] = get_args(BroadcastState)
# States in which a broadcast may still be cancelled.
CANCELLABLE_BROADCAST_STATES: Final[tuple[str, ...]] = ("draft", "approved", "sending")
# A follow-up (DESIGN.md §5.2, seed 004): `armed` waits for its armAt (the seed's UNDER_REVIEW),
# `notified` has had its notify event and waits for escalateAt, `follow_up` has had its reminder
# and is final (no third notification); `acknowledged` and `not_required` are in no claim set.
FollowupState = Literal["armed", "notified", "follow_up", "acknowledged", "not_required"]
FOLLOWUP_STATES: Final[tuple[str, ...]] = get_args(FollowupState)
# R-FOLLOW-4: a sweeper's transition (armed → notified → follow_up) never changes openness.
FOLLOWUP_OPEN_STATES: Final[tuple[str, ...]] = ("armed", "notified", "follow_up")

# Outbound webhooks to the host (issue 16): the event types an endpoint may subscribe to, and
# the life of one webhook message (queued → processing → sent, or back to queued with a backoff,
# or dead with its dead letter after the last attempt).
WebhookEventType = Literal[
    "delivery.sent",
    "delivery.delivered",
    "delivery.bounced",
    "delivery.dead",
    "event.completed",
    "broadcast.completed",
    "followup.reminded",
]
WEBHOOK_EVENT_TYPES: Final[tuple[str, ...]] = get_args(WebhookEventType)
# Sent by "send a test event" only; no endpoint subscribes to it.
WEBHOOK_TEST_EVENT: Final = "webhook.test"
WebhookMessageStatus = Literal["queued", "processing", "sent", "dead"]
WEBHOOK_MESSAGE_STATUSES: Final[tuple[str, ...]] = get_args(WebhookMessageStatus)

# Channels whose addresses a hard bounce marks undeliverable (undeliverable_address).
UNDELIVERABLE_CHANNELS: Final[tuple[str, ...]] = ("email", "sms", "whatsapp")
# Providers whose receipts, arriving before Herald has recorded the send, are kept until it is
# (pending_receipt), and their channels. Twilio posts a status callback once, for the messages
# Herald sent with a StatusCallback; Resend's webhook is retried by Svix and carries the events
# of every email of the account, Herald's or not, so an unknown Resend id is not kept.
PARKED_RECEIPT_PROVIDERS: Final[tuple[str, ...]] = ("twilio",)
PARKED_RECEIPT_CHANNELS: Final[tuple[str, ...]] = ("sms",)

# An escalation step (herald.scheduling.escalation): pending until due, then decided once.
EscalationStepState = Literal["pending", "sent", "skipped", "stopped"]
ESCALATION_STEP_STATES: Final[tuple[str, ...]] = get_args(EscalationStepState)
# Why a step was decided as it was: `read` stops the plan, `recipient_gone` (the recipient row
# or person is gone, or suspended) and `event_cancelled` (the event was cancelled) stop it,
# `preference` skips the step (the person switched the channel off), `already_sent` marks a
# step whose delivery existed already.
ESCALATION_REASONS: Final[tuple[str, ...]] = (
    "read",
    "recipient_gone",
    "event_cancelled",
    "preference",
    "already_sent",
)

EventState = Literal["scheduled", "pending", "fanning_out", "completed", "cancelled", "failed"]
EVENT_STATES: Final[tuple[str, ...]] = get_args(EventState)

ApiScope = Literal[
    "events:write",
    "events:read",
    "directory:write",
    "secrets:write",
    "feed:write",
    "followups:write",
    "admin",
    "metrics:read",
]
API_SCOPES: Final[tuple[str, ...]] = get_args(ApiScope)

# Variable names a stored event may never carry (R-SCHEMA-13 backstop CHECK): secrets travel
# only as {"secretRef": "<type>:<id>"}.
FORBIDDEN_VARIABLE_KEYS: Final[tuple[str, ...]] = (
    "token",
    "code",
    "otp",
    "password",
    "secret",
    "resetToken",
)

# Limits fixed by the seed (R-SEND-8, R-SEND-9).
MAX_EXPLICIT_RECIPIENTS: Final = 500
MAX_COMPOUND_MEMBERS: Final = 10
