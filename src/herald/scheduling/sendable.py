"""The check a broadcast draft and a reminder schedule share: each is accepted exactly when the
event it will send would be, because its kind, audience, channels and variables go through the
send path itself (sending.prepare), and a refusal names the field at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from herald.errors import (
    AudienceInvalid,
    AudienceTooLarge,
    ChannelUnknown,
    HeraldError,
    SecretInVariables,
    TemplateNotFound,
    ValidationFailed,
    VariablesInvalid,
)
from herald.kinds import Kind, Registry
from herald.sending import service as sending

# The send-path refusal → the field it is about.
SEND_FIELDS: tuple[tuple[type[HeraldError], str], ...] = (
    (TemplateNotFound, "kind"),
    (ChannelUnknown, "channels"),
    (AudienceInvalid, "audience"),
    (AudienceTooLarge, "audience"),
    (VariablesInvalid, "variables"),
    (SecretInVariables, "variables"),
)


def checked_kind(
    tenant_id: str,
    registry: Registry,
    *,
    kind: str,
    audience: Mapping[str, Any],
    channels: Sequence[str] | None,
    variables: Mapping[str, Any],
    invalid: Callable[[str, str], HeraldError],
    secret_refusal: str,
) -> Kind:
    """The registry's kind once the send path accepts the event; else `invalid(field, message)`.
    A kind with secret variables is refused first (`… carries a secret and <secret_refusal>`)."""
    found = registry.get(kind)
    if found is None:
        raise invalid("kind", f"no kind named {kind!r} in the registry")
    if found.secret_variables:
        raise invalid("kind", f"{found.name} carries a secret and {secret_refusal}")
    send_input = sending.SendInput(
        tenant_id=tenant_id,
        kind=kind,
        audience=audience,
        channels=channels,
        variables=variables,
    )
    try:
        sending.prepare(send_input, registry)
    except ValidationFailed as exc:
        field_name = next((f for cls, f in SEND_FIELDS if isinstance(exc, cls)), "audience")
        raise invalid(field_name, exc.message) from None
    return found
