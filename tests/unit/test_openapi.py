"""The published OpenAPI declares Herald's errors, in Herald's envelope, for every operation."""

from __future__ import annotations

from typing import Any

import pytest

from herald import errors
from herald.api.app import create_app
from herald.config import Settings
from herald.db.engine import make_async_engine
from herald.kinds.sample import SAMPLE_REGISTRY

# Nothing connects: building the app and its document needs no database.
URL = "postgresql://nobody@127.0.0.1:1/none"


def _all_error_classes() -> set[type[errors.HeraldError]]:
    found: set[type[errors.HeraldError]] = set()
    pending = [errors.HeraldError]
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending.extend(cls.__subclasses__())
    return found


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    settings = Settings(database_url=URL, jwt_secret="x" * 40)
    app = create_app(settings, make_async_engine(URL), SAMPLE_REGISTRY)
    document: dict[str, Any] = app.openapi()
    return document


def _operations(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{method.upper()} {path}", operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    ]


def _codes(response: dict[str, Any]) -> list[str]:
    schema = response["content"]["application/json"]["schema"]
    codes: list[str] = schema["properties"]["error"]["properties"]["code"]["enum"]
    return codes


def test_every_operation_declares_its_errors_in_herald_envelope(spec: dict[str, Any]) -> None:
    """Each operation: 401 where it takes a credential, 422 where it takes input, 503 and 500
    always; every error response is the envelope with codes that real HeraldErrors carry, each
    under the status its class answers with; FastAPI's HTTPValidationError is gone."""
    status_of = {cls.code: cls.status for cls in _all_error_classes()}
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for label, operation in _operations(spec):
        responses = operation["responses"]
        assert "503" in responses and "500" in responses, label
        assert "Retry-After" in responses["503"]["headers"], label
        if operation.get("security"):
            assert _codes(responses["401"]) == ["UNAUTHENTICATED"], label
        if operation.get("parameters") or "requestBody" in operation:
            assert "REQUEST_MALFORMED" in _codes(responses["422"]), label
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                for code in _codes(response):
                    assert status_of.get(code) == int(status), (label, status, code)


def test_errors_are_read_from_the_code_that_raises_them(spec: dict[str, Any]) -> None:
    """A route's specific errors are found through its service: the 409 of a stale preference
    version, the 404 of an unknown person, a cancel's two 409 reasons."""
    paths = spec["paths"]
    assert "NOTIFICATION_PREFERENCE_VERSION_CONFLICT" in _codes(
        paths["/v1/me/preferences"]["put"]["responses"]["409"]
    )
    assert "PERSON_NOT_FOUND" in _codes(
        paths["/v1/people/{externalId}"]["delete"]["responses"]["404"]
    )
    assert set(_codes(paths["/v1/events/{event_id}/cancel"]["post"]["responses"]["409"])) >= {
        "NOTIFICATION_ALREADY_CANCELLED",
        "NOTIFICATION_FANOUT_STARTED",
    }


def test_credentials_are_security_schemes(spec: dict[str, Any]) -> None:
    schemes = spec["components"]["securitySchemes"]
    assert schemes["apiKey"] == {**schemes["apiKey"], "type": "http", "scheme": "bearer"}
    assert schemes["userJwt"]["bearerFormat"] == "JWT"
    assert spec["paths"]["/v1/events"]["post"]["security"] == [{"apiKey": []}]
    assert spec["paths"]["/v1/me/preferences"]["put"]["security"] == [{"userJwt": []}]
    for _, operation in _operations(spec):
        names = {p["name"].lower() for p in operation.get("parameters", [])}
        assert not names & {"authorization", "x-api-key"}


def test_upserts_declare_created_and_updated(spec: dict[str, Any]) -> None:
    for path in ("/v1/people/{externalId}", "/v1/roles/{code}", "/v1/groups/{externalId}"):
        assert {"200", "201"} <= set(spec["paths"][path]["put"]["responses"]), path


def test_messages_carry_no_docstring_layout() -> None:
    """The 409 message of a version conflict is one clean line."""
    for cls in _all_error_classes():
        message = cls().message
        assert "\n" not in message and "  " not in message, cls


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/v1/events", "post"),
        ("/v1/people:batch", "post"),
        ("/v1/people/{externalId}", "put"),
        ("/v1/me/preferences", "put"),
    ],
)
def test_the_main_payloads_carry_an_example_their_model_accepts(
    spec: dict[str, Any], path: str, method: str
) -> None:
    """Generated clients and the docs show these; each must be a body the server takes."""
    from pydantic import BaseModel

    from herald.directory.schemas import PeopleBatch, PersonInput
    from herald.preferences.schemas import PreferencesUpdate
    from herald.sending.schemas import EventCreate

    models: dict[str, type[BaseModel]] = {
        "EventCreate": EventCreate,
        "PeopleBatch": PeopleBatch,
        "PersonInput": PersonInput,
        "PreferencesUpdate": PreferencesUpdate,
    }
    ref = spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    name = ref["$ref"].rsplit("/", 1)[-1]
    examples = spec["components"]["schemas"][name]["examples"]
    assert examples
    for example in examples:
        models[name].model_validate(example)


@pytest.fixture(scope="module")
def every_feature_spec() -> dict[str, Any]:
    settings = Settings(
        database_url=URL, jwt_secret="x" * 40, feature_reminders=True, feature_broadcasts=True
    )
    app = create_app(settings, make_async_engine(URL), SAMPLE_REGISTRY)
    document: dict[str, Any] = app.openapi()
    return document


def _resolved(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def test_every_request_body_publishes_the_fields_the_server_reads(
    every_feature_spec: dict[str, Any],
) -> None:
    """A route that reads its JSON body itself (to answer its own 400) still publishes the model
    its service applies: no operation takes an untyped body, and a follow-up, a reminder and a
    broadcast each name their required fields, the registry's kinds and the audience shapes."""
    spec = every_feature_spec
    for label, operation in _operations(spec):
        if "requestBody" not in operation:
            continue
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        resolved = _resolved(spec, body)
        assert resolved.get("properties") or resolved.get("oneOf"), label
    arm = _resolved(
        spec,
        spec["paths"]["/v1/followups"]["post"]["requestBody"]["content"]["application/json"][
            "schema"
        ],
    )
    assert {"key", "kind", "reminderKind", "audience"} <= set(arm["required"])
    assert "announcement.posted" in arm["properties"]["kind"]["enum"]
    assert arm["properties"]["audience"] == {"$ref": "#/components/schemas/Audience"}
    assert arm["additionalProperties"] is False
    shapes = spec["components"]["schemas"]["Audience"]["oneOf"]
    assert {shape["properties"]["kind"]["const"] for shape in shapes} >= {"users", "compound"}
    for path, method, field in (
        ("/v1/admin/reminders", "post", "timezone"),
        ("/v1/admin/broadcasts", "post", "title"),
        ("/v1/admin/broadcasts/{broadcast_id}", "put", "version"),
    ):
        schema = _resolved(
            spec,
            spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"],
        )
        assert field in schema["required"], (path, method)
