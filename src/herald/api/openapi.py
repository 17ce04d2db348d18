"""The published OpenAPI: FastAPI's document, with every error a route can answer declared.

FastAPI declares a route's success and a 422 in its own `{"detail": [...]}` shape, which Herald
never answers. Here every operation instead lists each error status it can answer in Herald's
envelope, `{"error": {"code", "message"}}`, with the codes that status can carry as an enum:

- the errors its code can raise, read from that code (herald.api.raises);
- 401 UNAUTHENTICATED where the operation takes a credential;
- 422 REQUEST_MALFORMED where it takes a parameter or a body, 413 REQUEST_TOO_LARGE with a body;
- 503 (with Retry-After) and 500, which any operation can answer.

The document is built once, on the first request for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import fastapi.routing
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from herald import vocabulary
from herald.api import raises
from herald.auth.deps import BODY_MODEL, BODY_MODELS
from herald.errors import (
    DatabaseConflict,
    DatabaseUnavailable,
    HeraldError,
    InternalError,
    RedisUnavailable,
    RequestMalformed,
    RequestTooLarge,
    ServiceUnavailable,
    Unauthenticated,
)
from herald.kinds import Registry

DESCRIPTION = """\
Herald's HTTP API. The host's server calls it with an API key; people (end users and operators)
call it with a JWT the host signs. Both travel as `Authorization: Bearer …`.

Every error is answered as `{"error": {"code": "…", "message": "…"}}`; each operation lists the
codes each of its error statuses can carry. A 503 carries `Retry-After`.
"""

# What any operation can answer, whatever its code: a dependency's outage, or a bug.
ALWAYS: tuple[type[HeraldError], ...] = (
    ServiceUnavailable,
    DatabaseUnavailable,
    DatabaseConflict,
    RedisUnavailable,
    InternalError,
)
# The bases of the hierarchy are named in `except` clauses, never raised as such.
_NEVER_ANSWERED = frozenset({HeraldError})


def install(app: FastAPI) -> None:
    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]


def build(app: FastAPI) -> dict[str, Any]:
    spec = get_openapi(
        title=app.title, version=app.version, description=DESCRIPTION, routes=app.routes
    )
    schemas = spec.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    _publish_registry(schemas, app.state.herald.registry)
    for route in leaf_routes(app):
        if not isinstance(getattr(route, "original_route", route), APIRoute):
            continue
        if not route.include_in_schema:
            continue
        raised = raises.errors_raised(_callables(route.dependant))
        for method in sorted(route.methods):
            operation = spec["paths"][route.path_format].get(method.lower())
            if operation is not None:
                _publish_body(operation, schemas, app.state.herald.registry)
                _declare_errors(operation, declared_errors(operation, raised))
    if schemas:
        spec.setdefault("components", {})["schemas"] = schemas
    return spec


def _publish_body(operation: dict[str, Any], schemas: dict[str, Any], registry: Registry) -> None:
    """The model a route marked with auth.deps.body_of applies, as its published request body."""
    name = operation.pop(BODY_MODEL, None)
    if name is None:
        return
    model = BODY_MODELS[name]
    if name not in schemas:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for nested, definition in schema.pop("$defs", {}).items():
            schemas.setdefault(nested, definition)
        properties = schema.get("properties", {})
        # An audience is one of the send path's audience shapes; a kind one of the registry's.
        if "audience" in properties:
            schemas.setdefault("Audience", audience_schema())
            properties["audience"] = {"$ref": "#/components/schemas/Audience"}
        kinds = sorted(kind.name for kind in registry)
        for field in ("kind", "reminderKind"):
            if field in properties:
                properties[field] = {"type": "string", "enum": kinds, "title": field}
        schemas[name] = schema
    operation["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


def _publish_registry(schemas: dict[str, Any], registry: Registry) -> None:
    """A kind is one of the loaded registry's kinds and a channel one of Herald's: published as
    enums, so a client (and a fuzzer) knows the names the server accepts."""
    kinds = sorted(kind.name for kind in registry)
    for model in ("EventCreate", "TemplateCreate", "PreviewRequest"):
        properties = schemas.get(model, {}).get("properties", {})
        if "kind" in properties:
            properties["kind"] = {"type": "string", "enum": kinds, "title": "Kind"}
    event = schemas.get("EventCreate")
    if event is not None:
        schemas["EventCreate"] = event_schema(event, registry)


# What the send path accepts, stated in JSON Schema so a client (and a fuzzer) can build a valid
# event from the document alone. The server's checks (herald.sending, herald.audience) and this
# schema say the same thing; tests/unit/test_openapi.py holds them together.
_NO_NUL = "^[^\\x00]*$"
# EventCreate.channels' own cap (a list of at most this many names, repeats included).
MAX_CHANNELS = 10
_ID = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": _NO_NUL}


def _id_list(cap: int | None) -> dict[str, Any]:
    listed: dict[str, Any] = {"type": "array", "items": _ID}
    if cap is not None:
        listed["maxItems"] = cap
    return listed


def audience_schemas() -> dict[str, dict[str, Any]]:
    """One schema per audience kind but compound (herald.audience.service.validate_audience)."""
    shapes: dict[str, dict[str, Any]] = {}
    lists = {
        "users": "userIds",
        "role": "roles",
        "group": "groupIds",
        "guardians_of_group": "groupIds",
        "guardians_of_users": "userIds",
    }
    for kind, key in lists.items():
        cap = (
            vocabulary.MAX_EXPLICIT_RECIPIENTS
            if kind in vocabulary.EXPLICIT_AUDIENCE_KINDS
            else None
        )
        shapes[kind] = {
            "type": "object",
            "properties": {"kind": {"const": kind}, key: _id_list(cap)},
            "required": ["kind", key],
            "additionalProperties": False,
        }
    shapes["all_users"] = {
        "type": "object",
        "properties": {"kind": {"const": "all_users"}},
        "required": ["kind"],
        "additionalProperties": False,
    }
    filters: dict[str, Any] = {
        "statuses": {"type": "array", "items": {"enum": list(vocabulary.PERSON_STATUSES)}},
        "locales": _id_list(None),
        "countries": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[A-Za-z]{2}$"},
        },
        "seenWithinDays": {"type": "integer", "minimum": 1, "maximum": 365},
    }
    shapes["segment"] = {
        "type": "object",
        "properties": {"kind": {"const": "segment"}, **filters},
        "required": ["kind"],
        "anyOf": [{"required": [name]} for name in filters],
        "additionalProperties": False,
    }
    return shapes


def audience_schema() -> dict[str, Any]:
    """Any audience the send path takes: one of the single shapes, or a compound of them."""
    shapes = audience_schemas()
    compound = {
        "type": "object",
        "properties": {
            "kind": {"const": "compound"},
            "any": {
                "type": "array",
                "items": {"oneOf": list(shapes.values())},
                "minItems": 1,
                "maxItems": vocabulary.MAX_COMPOUND_MEMBERS,
            },
        },
        "required": ["kind", "any"],
        "additionalProperties": False,
    }
    return {"oneOf": [*shapes.values(), compound]}


def event_schema(base: dict[str, Any], registry: Registry) -> dict[str, Any]:
    """EventCreate as one variant per kind: its channels, its declared variables (all required,
    nothing else), and for a kind that carries a secret, a secretRef to one person on one channel."""
    shapes = audience_schemas()
    audience = audience_schema()
    common = {
        name: schema
        for name, schema in base.get("properties", {}).items()
        if name in ("actionUrl", "scheduledFor")
    }
    variants = []
    for kind in sorted(registry, key=lambda k: k.name):
        variables: dict[str, Any] = {
            name: {"type": ["string", "number"], "maxLength": 10_000, "pattern": _NO_NUL}
            for name in kind.variables
        }
        required = list(kind.variables)
        # Repeats are dropped by the server, so the schema allows them; null means the kind's own.
        channels: dict[str, Any] = {
            "anyOf": [
                {
                    "type": "array",
                    "items": {"enum": list(kind.channels)},
                    "minItems": 1,
                    "maxItems": MAX_CHANNELS,
                },
                {"type": "null"},
            ]
        }
        kind_audience: dict[str, Any] = audience
        needs = ["kind", "audience"]
        if kind.secret_variables:
            variables["secretRef"] = {
                "type": "string",
                "pattern": "^[a-z][a-z0-9_]{0,63}:[A-Za-z0-9._~-]{1,200}$",
            }
            required.append("secretRef")
            # One person on one channel: the schema says "users"; "exactly one distinct id, one
            # distinct channel" it cannot say, and the server answers 400 for more.
            one = {**shapes["users"]}
            one["properties"] = {**one["properties"], "userIds": {**_id_list(None), "minItems": 1}}
            kind_audience = one
            if len(kind.channels) > 1:
                needs.append("channels")
        properties: dict[str, Any] = {
            "kind": {"const": kind.name},
            "audience": kind_audience,
            "channels": channels,
            "variables": {
                "type": "object",
                "properties": variables,
                "required": required,
                "additionalProperties": False,
            },
            **common,
        }
        if required:
            needs.append("variables")
        variants.append(
            {
                "title": f"EventCreate ({kind.name})",
                "type": "object",
                "properties": properties,
                "required": needs,
                "additionalProperties": False,
            }
        )
    # One example per registry: its first kind without a secret, with the kind's sample values.
    plain = [kind for kind in sorted(registry, key=lambda k: k.name) if not kind.secret_variables]
    examples = [
        {
            "kind": kind.name,
            "audience": {"kind": "users", "userIds": ["asha-rai"]},
            "variables": dict(kind.variables),
            "actionUrl": "https://school.example.com/notices/42",
        }
        for kind in plain[:1]
    ]
    return {
        "title": "EventCreate",
        "oneOf": variants,
        **({"examples": examples} if examples else {}),
    }


def leaf_routes(app: FastAPI) -> Iterator[Any]:
    """Every route the app serves, through included routers. Newer FastAPI keeps an included
    router as one entry of `app.routes` and walks it with `iter_route_contexts`; older versions
    copy its routes in. Either way each item has path_format, path_regex, methods, dependant."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    routes: Iterator[Any] = iter(iterate(app.routes) if iterate is not None else app.routes)
    return routes


def declared_errors(
    operation: dict[str, Any], raised: frozenset[type[HeraldError]]
) -> set[type[HeraldError]]:
    """The errors one operation can answer: what its code raises plus the always-present ones."""
    errors = set(raised) - _NEVER_ANSWERED
    errors.update(ALWAYS)
    if operation.get("security"):
        errors.add(Unauthenticated)
    if operation.get("parameters") or "requestBody" in operation:
        errors.add(RequestMalformed)
    if "requestBody" in operation:
        errors.add(RequestTooLarge)
    return errors


def error_response(errors: list[type[HeraldError]]) -> dict[str, Any]:
    """One status's response: the envelope with its codes as an enum, each code explained."""
    ordered = sorted(errors, key=lambda error: error.code)
    codes = list(dict.fromkeys(error.code for error in ordered))
    lines = [f"- `{error.code}`: {error.default_message()}" for error in ordered]
    response: dict[str, Any] = {
        "description": "\n".join(dict.fromkeys(lines)),
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string", "enum": codes},
                                "message": {"type": "string"},
                            },
                        }
                    },
                }
            }
        },
    }
    if all(issubclass(error, ServiceUnavailable) for error in errors):
        response["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before trying again.",
                "required": True,
                "schema": {"type": "integer", "minimum": 0},
            }
        }
    return response


def _declare_errors(operation: dict[str, Any], errors: set[type[HeraldError]]) -> None:
    by_status: dict[int, list[type[HeraldError]]] = defaultdict(list)
    for error in errors:
        by_status[error.status].append(error)
    responses: dict[str, Any] = operation["responses"]
    # FastAPI's own 422 (`{"detail": [...]}`) is not what Herald answers.
    responses.pop("422", None)
    for status in sorted(by_status):
        responses[str(status)] = error_response(by_status[status])


def _callables(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _callables(sub)
