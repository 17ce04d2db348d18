"""The HeraldError hierarchy: each class carries its code, HTTP status and default message.

One exception handler (herald.api.app) renders them as {"error": {"code", "message"}}; a route
never builds an error body by hand.
"""

from __future__ import annotations

from typing import ClassVar


class HeraldError(Exception):
    """Something went wrong inside Herald."""

    code: ClassVar[str] = "HERALD_ERROR"
    status: ClassVar[int] = 500

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message()
        super().__init__(self.message)

    @classmethod
    def default_message(cls) -> str:
        """The class's docstring as one line: a wrapped docstring must not leak its newlines and
        indentation into a response."""
        return " ".join((cls.__doc__ or cls.code).split())


class ValidationFailed(HeraldError):
    """The request is not valid."""

    code = "VALIDATION_FAILED"
    status = 400


class RequestMalformed(HeraldError):
    """The request does not match its schema (a field is missing, unknown, of the wrong type or
    out of bounds, or the body is not JSON)."""

    code = "REQUEST_MALFORMED"
    status = 422


class RequestTooLarge(HeraldError):
    """The request body is larger than Herald accepts."""

    code = "REQUEST_TOO_LARGE"
    status = 413


class MethodNotAllowed(HeraldError):
    """This path does not serve that method; the Allow header lists the ones it does."""

    code = "METHOD_NOT_ALLOWED"
    status = 405


class TemplateNotFound(ValidationFailed):
    """The kind is not in the registry."""

    code = "NOTIFICATION_TEMPLATE_NOT_FOUND"


class ChannelUnknown(ValidationFailed):
    """The kind has no builder for a requested channel."""

    code = "NOTIFICATION_CHANNEL_UNKNOWN"


class AudienceTooLarge(ValidationFailed):
    """The audience exceeds its cap."""

    code = "NOTIFICATION_AUDIENCE_TOO_LARGE"


class AudienceInvalid(ValidationFailed):
    """The audience specification is malformed."""

    code = "NOTIFICATION_AUDIENCE_INVALID"


class ActionUrlForbidden(ValidationFailed):
    """The action URL must be an absolute https: URL or an app-relative path."""

    code = "NOTIFICATION_ACTION_URL_SCHEME_FORBIDDEN"


class VariablesInvalid(ValidationFailed):
    """The variables are not valid for this kind."""

    code = "NOTIFICATION_VARIABLES_INVALID"


class DeliverAtInvalid(ValidationFailed):
    """deliverAt is not valid: `localTime` must be HH:MM from 00:00 to 23:59, `date` a real
    calendar date YYYY-MM-DD whose time has not passed everywhere on Earth and is at most a year
    ahead, and deliverAt cannot be given with scheduledFor."""

    code = "NOTIFICATION_DELIVER_AT_INVALID"


class SecretInVariables(ValidationFailed):
    """A secret must be passed as {"secretRef": …}, never as a variable."""

    code = "NOTIFICATION_SECRET_IN_VARIABLES"


class SecretAudienceInvalid(ValidationFailed):
    """A kind that carries a secret goes to exactly one person on exactly one channel."""

    code = "NOTIFICATION_SECRET_AUDIENCE_INVALID"


class PaginationRequired(ValidationFailed):
    """Lists are paged; pagination=false is refused."""

    code = "PAGINATION_REQUIRED"


class CursorInvalid(ValidationFailed):
    """The cursor is not one this list issued."""

    code = "CURSOR_INVALID"


class Unauthenticated(HeraldError):
    """Missing or invalid credentials."""

    code = "UNAUTHENTICATED"
    status = 401


class RateLimited(HeraldError):
    """Too many requests; wait for the number of seconds in Retry-After, then try again."""

    code = "RATE_LIMITED"
    status = 429

    def __init__(self, message: str | None = None, *, retry_after: int = 1) -> None:
        super().__init__(message)
        # Seconds until the limit lets one more request through (the Retry-After header).
        self.retry_after = retry_after


class Forbidden(HeraldError):
    """The credential is valid but does not cover this surface."""

    code = "FORBIDDEN"
    status = 403


class NotFound(HeraldError):
    """Not found."""

    code = "NOT_FOUND"
    status = 404


class NotificationNotFound(NotFound):
    """No such notification."""

    code = "NOTIFICATION_NOT_FOUND"


class EventNotFound(NotFound):
    """No such event."""

    code = "NOTIFICATION_EVENT_NOT_FOUND"


class PersonNotFound(NotFound):
    """No such person."""

    code = "PERSON_NOT_FOUND"


class GroupNotFound(NotFound):
    """No such group."""

    code = "GROUP_NOT_FOUND"


class RoleNotFound(NotFound):
    """No such role."""

    code = "ROLE_NOT_FOUND"


class Conflict(HeraldError):
    """The request conflicts with the current state."""

    code = "CONFLICT"
    status = 409


class SendOutsideTransaction(HeraldError):
    """send() needs the caller's own transaction; an autocommit or idle connection would commit
    the event independently of the business write it describes."""

    code = "NOTIFICATION_SEND_OUTSIDE_TRANSACTION"


class ConfigurationError(HeraldError):
    """Herald's configuration is not valid; the process refuses to start."""

    code = "CONFIGURATION_INVALID"


class DatabaseSessionRequired(ConfigurationError):
    """HERALD_DATABASE_URL reaches a pooler that shares server connections between clients
    (PgBouncer in transaction mode), and this process needs a session of its own: set
    HERALD_DATABASE_SESSION_URL to a direct PostgreSQL URL."""

    code = "DATABASE_SESSION_REQUIRED"


class DatabaseSessionUrlInvalid(ConfigurationError):
    """HERALD_DATABASE_SESSION_URL must reach the same PostgreSQL database as HERALD_DATABASE_URL
    directly (or through a pooler in session mode), never through a transaction pooler."""

    code = "DATABASE_SESSION_URL_INVALID"


class DatabaseReadUrlInvalid(ConfigurationError):
    """HERALD_DATABASE_READ_URL must reach a standby (in recovery) of the same PostgreSQL cluster
    as HERALD_DATABASE_URL."""

    code = "DATABASE_READ_URL_INVALID"


class RegistryError(ConfigurationError):
    """The kind registry is not valid; the process refuses to start."""

    code = "REGISTRY_INVALID"


class DirectoryBatchTooLarge(ValidationFailed):
    """A directory batch holds at most 1,000 people."""

    code = "DIRECTORY_BATCH_TOO_LARGE"


class DirectoryBatchDuplicate(ValidationFailed):
    """A directory batch names the same external id more than once."""

    code = "DIRECTORY_BATCH_DUPLICATE"


class DirectoryRoleUnknown(Conflict):
    """A person names a role code this tenant has not defined (PUT /v1/roles/{code} first)."""

    code = "DIRECTORY_ROLE_UNKNOWN"


class DirectoryGuardianshipSelf(Conflict):
    """A person cannot be their own guardian."""

    code = "DIRECTORY_GUARDIANSHIP_SELF"


class DirectoryValueInvalid(ValidationFailed):
    """A directory value was refused by the database."""

    code = "DIRECTORY_VALUE_INVALID"


class MembershipNotFound(NotFound):
    """No such group membership."""

    code = "MEMBERSHIP_NOT_FOUND"


class GuardianshipNotFound(NotFound):
    """No such guardianship."""

    code = "GUARDIANSHIP_NOT_FOUND"


class TelegramTemplateInvalid(ValidationFailed):
    """A Telegram template may use only balanced b, strong, i, em, u, ins, s, strike, del and code
    tags, without attributes, and no bare angle bracket."""

    code = "TELEGRAM_TEMPLATE_INVALID"


class SmsBalanceUnavailable(HeraldError):
    """The SMS provider's balance could not be read."""

    code = "SMS_BALANCE_UNAVAILABLE"
    status = 502


class DeviceNotFound(NotFound):
    """No such device."""

    code = "NOTIFICATION_DEVICE_NOT_FOUND"


class DeviceLimitReached(Conflict):
    """This person already has the most push devices allowed; remove one before adding another."""

    code = "NOTIFICATION_DEVICE_LIMIT_REACHED"


class PushSubscriptionInvalid(ValidationFailed):
    """A Web Push subscription needs an https endpoint and its keys: p256dh (a P-256 public key,
    65 bytes) and auth (16 bytes), each base64url; other platforms take a token and no keys."""

    code = "PUSH_SUBSCRIPTION_INVALID"


class PushEndpointForbidden(ValidationFailed):
    """The Web Push endpoint resolves to a private, loopback, link-local or metadata address, or
    does not resolve."""

    code = "PUSH_ENDPOINT_FORBIDDEN"


class WebPushNotConfigured(NotFound):
    """Web Push is not configured on this Herald (HERALD_WEBPUSH_VAPID_SUBJECT)."""

    code = "WEBPUSH_NOT_CONFIGURED"


class DeviceRegistrationConflict(Conflict):
    """The token was being registered concurrently; try again."""

    code = "NOTIFICATION_DEVICE_REGISTRATION_CONFLICT"


class EventAlreadyCancelled(Conflict):
    """already_cancelled: the event was cancelled before this request."""

    code = "NOTIFICATION_ALREADY_CANCELLED"


class EventFanoutStarted(Conflict):
    """fanout_started: the fan-out has already claimed this event, so it can no longer be
    cancelled."""

    code = "NOTIFICATION_FANOUT_STARTED"


class PreferenceInvalid(ValidationFailed):
    """The preferences name a channel or category Herald does not know."""

    code = "NOTIFICATION_PREFERENCE_INVALID"


class QuietHoursInvalid(HeraldError):
    """The quiet hours are not valid: start and end must be local times HH:MM that differ, and
    the zone an IANA time zone name (like Asia/Kathmandu)."""

    code = "NOTIFICATION_QUIET_HOURS_INVALID"
    status = 422


class PreferenceVersionConflict(Conflict):
    """The preferences changed since this version was read (another device saved first); read
    them again and reapply the change."""

    code = "NOTIFICATION_PREFERENCE_VERSION_CONFLICT"


class TemplateOverrideNotFound(NotFound):
    """No such template override."""

    code = "NOTIFICATION_TEMPLATE_OVERRIDE_NOT_FOUND"


class TemplateOverrideExists(Conflict):
    """This kind already has an override for that channel and locale; update it instead."""

    code = "NOTIFICATION_TEMPLATE_OVERRIDE_EXISTS"


class TemplateVersionConflict(Conflict):
    """The template override changed since it was read; re-read it and apply the change again."""

    code = "NOTIFICATION_TEMPLATE_VERSION_CONFLICT"


class TemplateStatusConflict(Conflict):
    """The template override's status does not allow this change."""

    code = "NOTIFICATION_TEMPLATE_STATUS_CONFLICT"


class TemplatePlaceholderUnknown(ValidationFailed):
    """The template uses a placeholder the kind does not declare."""

    code = "NOTIFICATION_TEMPLATE_PLACEHOLDER_UNKNOWN"


class TemplatePlaceholderMalformed(ValidationFailed):
    """Placeholders are flat names in double braces, like {{title}}; nothing else is evaluated."""

    code = "NOTIFICATION_TEMPLATE_PLACEHOLDER_MALFORMED"


class TemplatePlaceholderRequired(ValidationFailed):
    """The template leaves out a secret placeholder the kind's message exists to carry."""

    code = "NOTIFICATION_TEMPLATE_PLACEHOLDER_REQUIRED"


class TemplateBodyBlank(ValidationFailed):
    """A template body cannot be empty or blank."""

    code = "NOTIFICATION_TEMPLATE_BODY_BLANK"


class TemplateTitleRequired(ValidationFailed):
    """In-app, email, push, Slack and Teams templates need a title."""

    code = "NOTIFICATION_TEMPLATE_TITLE_REQUIRED"


class TemplateTitleNotAllowed(ValidationFailed):
    """SMS, Telegram and WhatsApp templates have a body only."""

    code = "NOTIFICATION_TEMPLATE_TITLE_NOT_ALLOWED"


class TemplateWhatsAppParameters(ValidationFailed):
    """A WhatsApp template's wording uses exactly the approved template's parameters, one each."""

    code = "NOTIFICATION_TEMPLATE_WHATSAPP_PARAMETERS"


class FeedNotificationNotFound(NotFound):
    """No such feed notification."""

    code = "FEED_NOTIFICATION_NOT_FOUND"


class FeedNotificationInvalid(ValidationFailed):
    """The feed notification is not valid."""

    code = "FEED_NOTIFICATION_INVALID"


class FeedReaderRequired(Forbidden):
    """Feed read state belongs to a person; an API key has none (sign in as a person)."""

    code = "FEED_READER_REQUIRED"


class FeedPublishOutsideTransaction(HeraldError):
    """feed.publish() needs the caller's own transaction; an autocommit or idle connection would
    commit the feed row independently of the business write it describes."""

    code = "FEED_PUBLISH_OUTSIDE_TRANSACTION"


class OperationalEventUnknown(ValidationFailed):
    """The operational email's event type is not one Herald knows; nothing was enqueued."""

    code = "OPERATIONAL_EVENT_UNKNOWN"


class OperationalEmailInvalid(ValidationFailed):
    """An operational email needs a subject and one to three label/value rows."""

    code = "OPERATIONAL_EMAIL_INVALID"


class ServiceUnavailable(HeraldError):
    """A service Herald depends on is unavailable; try again shortly."""

    code = "SERVICE_UNAVAILABLE"
    status = 503
    # Seconds a client should wait before trying again (the Retry-After header).
    retry_after: ClassVar[int] = 2


class DatabaseUnavailable(ServiceUnavailable):
    """The database is unavailable (stopped, restarting or being switched); try again shortly."""

    code = "DATABASE_UNAVAILABLE"


class DatabaseConflict(ServiceUnavailable):
    """The database rolled this request back to break a lock conflict with concurrent work
    (a deadlock); nothing was changed. Try again."""

    code = "DATABASE_CONFLICT"
    retry_after: ClassVar[int] = 1


class RedisUnavailable(ServiceUnavailable):
    """Redis (the secret vault and realtime transport) is unavailable; try again shortly."""

    code = "REDIS_UNAVAILABLE"


class JwksUnavailable(ServiceUnavailable):
    """The JWT key set (HERALD_JWT_JWKS_URL) could not be fetched; try again shortly."""

    code = "JWKS_UNAVAILABLE"


class InternalError(HeraldError):
    """Something unexpected went wrong inside Herald; it has been logged."""

    code = "INTERNAL_ERROR"


class FeatureDisabled(NotFound):
    """This feature is switched off in this deployment (HERALD_FEATURE_…)."""

    code = "NOTIFICATION_FEATURE_DISABLED"


class ReminderInvalid(ValidationFailed):
    """The reminder schedule is not valid; the message names the field."""

    code = "NOTIFICATION_REMINDER_INVALID"


class ReminderNotFound(NotFound):
    """No such reminder schedule."""

    code = "NOTIFICATION_REMINDER_NOT_FOUND"


class ReminderVersionConflict(Conflict):
    """The reminder schedule changed since it was read; re-read it and apply the change again."""

    code = "NOTIFICATION_REMINDER_VERSION_CONFLICT"


class BroadcastInvalid(ValidationFailed):
    """The broadcast is not valid; the message names the field."""

    code = "NOTIFICATION_BROADCAST_INVALID"


class BroadcastNotFound(NotFound):
    """No such broadcast."""

    code = "NOTIFICATION_BROADCAST_NOT_FOUND"


class BroadcastVersionConflict(Conflict):
    """The broadcast changed since it was read; re-read it and apply the change again."""

    code = "NOTIFICATION_BROADCAST_VERSION_CONFLICT"


class BroadcastNotDraft(Conflict):
    """Only a draft broadcast can be changed or approved."""

    code = "NOTIFICATION_BROADCAST_NOT_DRAFT"


class BroadcastAlreadyApproved(Conflict):
    """The broadcast is already approved."""

    code = "NOTIFICATION_BROADCAST_ALREADY_APPROVED"


class BroadcastCancelled(Conflict):
    """The broadcast was cancelled."""

    code = "NOTIFICATION_BROADCAST_CANCELLED"


class BroadcastCompleted(Conflict):
    """The broadcast has completed; there is nothing left to cancel."""

    code = "NOTIFICATION_BROADCAST_COMPLETED"


class BroadcastSelfApproval(Conflict):
    """A broadcast is approved by a different person from the one who created it."""

    code = "NOTIFICATION_BROADCAST_SELF_APPROVAL"


class BroadcastApproverNotPerson(Forbidden):
    """Approving a broadcast needs a person (an operator's token), never an API key."""

    code = "NOTIFICATION_BROADCAST_APPROVER_NOT_PERSON"


class BroadcastTemplateInvalid(ValidationFailed):
    """The broadcast's kind, or its published override, does not render."""

    code = "NOTIFICATION_BROADCAST_TEMPLATE_INVALID"


class FollowupInvalid(ValidationFailed):
    """The follow-up is not valid; the message names the field."""

    code = "NOTIFICATION_FOLLOWUP_INVALID"


class FollowupNotFound(NotFound):
    """No such follow-up."""

    code = "NOTIFICATION_FOLLOWUP_NOT_FOUND"


# ---------------------------------------------------------------------------------------------
# A tenant's provider accounts (herald.admin.providers). No message here ever carries a value a
# tenant sent: a secret typed into the wrong field must not come back in an error.


class ProviderAccountNotFound(NotFound):
    """This tenant holds no account for that provider."""

    code = "NOTIFICATION_PROVIDER_ACCOUNT_NOT_FOUND"


class ProviderSettingsInvalid(HeraldError):
    """The provider settings are not valid: an unknown field, or a value of the wrong shape."""

    code = "NOTIFICATION_PROVIDER_SETTINGS_INVALID"
    status = 422


class ProviderHostForbidden(HeraldError):
    """The SMTP host resolves to a private, loopback, link-local or metadata address."""

    code = "NOTIFICATION_PROVIDER_HOST_FORBIDDEN"
    status = 422


class ProviderHostUnresolvable(HeraldError):
    """The SMTP host name does not resolve."""

    code = "NOTIFICATION_PROVIDER_HOST_UNRESOLVABLE"
    status = 422


class ProviderAccountVersionConflict(Conflict):
    """The provider account changed since it was read; read it again and retry."""

    code = "NOTIFICATION_PROVIDER_ACCOUNT_VERSION_CONFLICT"


# --- channel escalation (docs/escalation.md) ----------------------------------------------------


class KindNotFound(NotFound):
    """The registry has no such kind."""

    code = "NOTIFICATION_KIND_NOT_FOUND"


class EscalationOverrideNotFound(NotFound):
    """This kind has no escalation override for the tenant; it already uses the code's plan."""

    code = "NOTIFICATION_ESCALATION_OVERRIDE_NOT_FOUND"


class EscalationPlanInvalid(ValidationFailed):
    """The escalation plan is not valid; the message names the step."""

    code = "ESCALATION_PLAN_INVALID"
    status = 422


class EscalationNotDeclared(EscalationPlanInvalid):
    """The kind declares no escalation plan, so there are no delays to change."""

    code = "ESCALATION_NOT_DECLARED"


class EscalationEmpty(EscalationPlanInvalid):
    """An escalation plan has at least one step."""

    code = "ESCALATION_EMPTY"


class EscalationUnknownChannel(EscalationPlanInvalid):
    """A step names a channel the kind cannot escalate to."""

    code = "ESCALATION_UNKNOWN_CHANNEL"


class EscalationCycle(EscalationPlanInvalid):
    """A channel appears twice in the plan."""

    code = "ESCALATION_CYCLE"


class EscalationStepBeforePredecessor(EscalationPlanInvalid):
    """A step would be due before the step it follows."""

    code = "ESCALATION_STEP_BEFORE_PREDECESSOR"


class EscalationDelayOutOfRange(EscalationPlanInvalid):
    """A step's delay is 1 second to 30 days."""

    code = "ESCALATION_DELAY_OUT_OF_RANGE"


class EscalationChannelsFixed(EscalationPlanInvalid):
    """An override changes the delays only: its steps are the code's channels, in order."""

    code = "ESCALATION_CHANNELS_FIXED"
