"""The published EventCreate schema and the send path's own checks say the same thing.

POST /v1/events is published as one variant per kind of the loaded registry (its channels, its
declared variables, a secretRef for a kind that carries a secret), so a client — or a fuzzer —
can build an event the server accepts from the document alone. Here every kind's example is
valid by the schema and accepted by `prepare()`, and each way of breaking it is refused by both.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema_rs
import pytest

from herald.api.openapi import event_schema
from herald.errors import HeraldError
from herald.kinds import Kind
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.sending.service import SendInput, prepare

BASE = {
    "properties": {
        "actionUrl": {"anyOf": [{"type": "string", "maxLength": 2048}, {"type": "null"}]},
        "scheduledFor": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
    }
}
SCHEMA = event_schema(BASE, SAMPLE_REGISTRY)
VALID = jsonschema_rs.validator_for(SCHEMA)
KINDS = sorted(SAMPLE_REGISTRY, key=lambda k: k.name)


def example(kind: Kind) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": kind.name, "variables": dict(kind.variables)}
    if kind.secret_variables:
        body["variables"]["secretRef"] = "password_reset:abc123"
        body["audience"] = {"kind": "users", "userIds": ["u1"]}
        body["channels"] = [kind.channels[0]]
    else:
        body["audience"] = {
            "kind": "compound",
            "any": [
                {"kind": "guardians_of_group", "groupIds": ["class-7a"]},
                {"kind": "segment", "statuses": ["active"], "seenWithinDays": 30},
            ],
        }
    return body


def server_accepts(body: dict[str, Any]) -> bool:
    try:
        prepare(
            SendInput(
                tenant_id="t",
                kind=body["kind"],
                audience=body["audience"],
                channels=body.get("channels"),
                variables=body.get("variables", {}),
            ),
            SAMPLE_REGISTRY,
        )
    except HeraldError:
        return False
    return True


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_each_kinds_example_is_valid_by_the_schema_and_accepted(kind: Kind) -> None:
    """Issue 17: the schema lets a client build an event the server accepts, for every kind."""
    body = example(kind)
    assert VALID.is_valid(body), list(VALID.iter_errors(body))[:3]
    assert server_accepts(body)


def _breakages(kind: Kind) -> list[tuple[str, dict[str, Any]]]:
    broken: list[tuple[str, dict[str, Any]]] = []

    def variant(name: str, change: Any) -> None:
        body = copy.deepcopy(example(kind))
        change(body)
        broken.append((name, body))

    variant("undeclared variable", lambda b: b["variables"].update(stranger="x"))
    variant("unknown channel", lambda b: b.update(channels=["carrier_pigeon"]))
    variant("no channels", lambda b: b.update(channels=[]))
    variant(
        "a boolean variable", lambda b: b["variables"].update({k: True for k in b["variables"]})
    )
    variant(
        "NUL in a value", lambda b: b["variables"].update({k: "a\x00b" for k in b["variables"]})
    )
    variant("unknown audience kind", lambda b: b.update(audience={"kind": "everyone"}))
    variant(
        "nested compound",
        lambda b: b.update(
            audience={
                "kind": "compound",
                "any": [{"kind": "compound", "any": [{"kind": "all_users"}]}],
            }
        ),
    )
    variant("empty segment", lambda b: b.update(audience={"kind": "segment"}))
    variant(
        "days out of range",
        lambda b: b.update(audience={"kind": "segment", "seenWithinDays": 366}),
    )
    variant("empty id", lambda b: b.update(audience={"kind": "users", "userIds": [""]}))
    variant("extra audience key", lambda b: b.update(audience={"kind": "all_users", "x": 1}))
    if kind.variables:
        variant("a variable missing", lambda b: b["variables"].pop(next(iter(b["variables"]))))
    return broken


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_what_the_schema_refuses_the_server_refuses(kind: Kind) -> None:
    """Issue 17 (negative data): no event the schema calls invalid is accepted by the server."""
    for name, body in _breakages(kind):
        if VALID.is_valid(body):
            continue  # e.g. "a variable missing" for a kind whose only value is its secretRef
        assert not server_accepts(body), (kind.name, name)


def test_the_channel_list_cap_is_published() -> None:
    """Issue 17: EventCreate refuses more than ten channel names (repeats included), and the
    schema says so, so a fuzzer's fifteen repeats are schema-invalid, not a rejected valid body."""
    from herald.sending.schemas import EventCreate

    kind = next(k for k in KINDS if not k.secret_variables)
    body = example(kind)
    body["channels"] = [kind.channels[0]] * 10
    assert VALID.is_valid(body) and server_accepts(body)
    body["channels"] = [kind.channels[0]] * 11
    assert not VALID.is_valid(body)
    cap = EventCreate.model_fields["channels"].metadata
    assert any(getattr(m, "max_length", None) == 10 for m in cap)
