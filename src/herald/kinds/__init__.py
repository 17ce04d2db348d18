"""The kind registry: what can be sent, in which category, on which channels, with which words."""

from __future__ import annotations

from herald.kinds.registry import (
    Digest,
    Escalation,
    EscalationStep,
    Kind,
    Registry,
    Template,
    WhatsAppTemplate,
    get_registry,
    load_registry,
)

__all__ = [
    "Digest",
    "Escalation",
    "EscalationStep",
    "Kind",
    "Registry",
    "Template",
    "WhatsAppTemplate",
    "get_registry",
    "load_registry",
]
