"""The WhatsApp provider against a local server speaking the Graph API's messages edge: the
template message it posts (bearer token, body shape, the parameters in the template's order),
every row of its error table, and the token kept out of every log line, outcome and detail."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

import pytest

from herald.channels.base import Message, ProviderOutcome, TemplateCall
from herald.channels.providers import build_providers
from herald.channels.whatsapp import WHATSAPP_ERROR_CODES, WhatsAppProvider
from herald.config import Settings
from tests.providers.outcomes import assert_failed
from tests.providers.servers import (
    WHATSAPP_PHONE_NUMBER_ID,
    WHATSAPP_TOKEN,
    ChatReply,
    WhatsAppTestServer,
    smtp_free_port,
    whatsapp_error,
    whatsapp_server,
)

NUMBER = "+9779812345678"
TEMPLATE = TemplateCall(
    name="fee_reminder", language="en", parameters=("NPR 12,500", "Aarav Shrestha", "2026-12-15")
)


@pytest.fixture
def server() -> Iterator[WhatsAppTestServer]:
    with whatsapp_server() as running:
        running.approve("fee_reminder", "en", 3)
        running.approve("fee_reminder", "ne", 3)
        yield running


def _settings(api_url: str, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "whatsapp_provider": "whatsapp",
        "whatsapp_token": WHATSAPP_TOKEN,
        "whatsapp_phone_number_id": WHATSAPP_PHONE_NUMBER_ID,
        "whatsapp_api_url": api_url,
        "provider_connect_timeout_seconds": 2.0,
        "provider_read_timeout_seconds": 2.0,
    }
    values.update(changes)
    return Settings(**values)


@pytest.fixture
async def provider(server: WhatsAppTestServer) -> AsyncIterator[WhatsAppProvider]:
    instance = WhatsAppProvider(_settings(server.api_url))
    yield instance
    await instance.aclose()


_message = partial(
    Message,
    channel="whatsapp",
    to=NUMBER,
    body="A fee of NPR 12,500 for Aarav Shrestha is due on 2026-12-15.",
    template=TEMPLATE,
)


_assert_failure = partial(assert_failed, codes=WHATSAPP_ERROR_CODES)


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", [{"whatsapp_token": None}, {"whatsapp_phone_number_id": " "}])
async def test_unconfigured_without_token_or_phone_number_id(missing: dict[str, Any]) -> None:
    """R-PROVIDER-13, R-PROVIDER-14: built without credentials; send is skipped/unconfigured."""
    provider = WhatsAppProvider(_settings("http://127.0.0.1:9/v21.0", **missing))
    assert provider.is_configured() is False
    assert await provider.send(_message()) == ProviderOutcome.unconfigured()
    await provider.aclose()


def test_built_for_the_channel_and_mockable() -> None:
    providers = build_providers(
        Settings(whatsapp_token=WHATSAPP_TOKEN, whatsapp_phone_number_id=WHATSAPP_PHONE_NUMBER_ID)
    )
    assert isinstance(providers["whatsapp"], WhatsAppProvider)
    assert providers["whatsapp"].is_configured()
    assert not build_providers(Settings())["whatsapp"].is_configured()
    assert build_providers(Settings(whatsapp_provider="mock"))["whatsapp"].is_mock


# -- success -------------------------------------------------------------------------------------


async def test_a_template_message_with_its_parameters_in_order(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    outcome = await provider.send(_message())
    assert outcome.outcome == "sent"
    assert outcome.provider_message_id is not None
    assert outcome.provider_message_id.startswith("wamid.")
    assert outcome.provider_status == "accepted"
    [request] = server.requests
    assert request.path == f"/v21.0/{WHATSAPP_PHONE_NUMBER_ID}/messages"
    assert request.headers["authorization"] == f"Bearer {WHATSAPP_TOKEN}"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "9779812345678",
        "type": "template",
        "template": {
            "name": "fee_reminder",
            "language": {"code": "en"},
            "components": [
                {
                    "type": "body",
                    "parameters": [
                        {"type": "text", "text": "NPR 12,500"},
                        {"type": "text", "text": "Aarav Shrestha"},
                        {"type": "text", "text": "2026-12-15"},
                    ],
                }
            ],
        },
    }


async def test_the_language_is_the_templates(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    template = TemplateCall(name="fee_reminder", language="ne", parameters=("a", "b", "c"))
    assert (await provider.send(_message(template=template))).outcome == "sent"
    assert server.requests[0].json()["template"]["language"] == {"code": "ne"}


async def test_a_parameter_is_flattened_and_clipped(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    """Meta refuses a parameter holding a newline or a tab (132012): they become spaces, and a
    value longer than Meta's 1,024 characters is cut with an ellipsis."""
    template = TemplateCall(
        name="fee_reminder", language="en", parameters=("a\nb\tc", "x" * 2000, "d      e")
    )
    assert (await provider.send(_message(template=template))).outcome == "sent"
    texts = [
        p["text"] for p in server.requests[0].json()["template"]["components"][0]["parameters"]
    ]
    assert texts[0] == "a b c"
    assert len(texts[1]) == 1024 and texts[1].endswith("…")
    assert texts[2] == "d   e"


async def test_a_template_without_parameters_has_no_components(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    server.approve("hello_world", "en_US", 0)
    template = TemplateCall(name="hello_world", language="en_US")
    assert (await provider.send(_message(template=template))).outcome == "sent"
    assert "components" not in server.requests[0].json()["template"]


# -- refused before any request --------------------------------------------------------------------


async def test_a_number_that_is_not_e164_is_refused_without_a_request(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    outcome = await provider.send(_message(to="9812345678"))
    _assert_failure(outcome, "WHATSAPP_INVALID_NUMBER", retryable=False)
    assert server.requests == []


async def test_a_message_without_a_template_is_never_sent_as_text(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    """Outside the 24-hour window only approved templates arrive: no template, no request."""
    outcome = await provider.send(_message(template=None))
    _assert_failure(outcome, "WHATSAPP_TEMPLATE", retryable=False)
    assert server.requests == []


# -- the error table -----------------------------------------------------------------------------


async def test_undeliverable_number_is_permanent_and_marks_it(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    server.reply_with(whatsapp_error(131026, message=f"Message to {NUMBER} undeliverable"))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "WHATSAPP_UNREACHABLE", retryable=False)
    assert outcome.destination_undeliverable is True
    assert outcome.detail is not None and outcome.detail.startswith("whatsapp_131026")
    assert "9812345678" not in (outcome.detail or "")


async def test_re_engagement_is_permanent_with_a_reason(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    server.reply_with(whatsapp_error(131047))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "WHATSAPP_REENGAGEMENT", retryable=False)
    assert (
        outcome.detail
        == "whatsapp_131047: re-engagement required - 24 hours since the person wrote"
    )
    assert outcome.destination_undeliverable is False


@pytest.mark.parametrize(
    ("code", "status", "retry_after", "expected"),
    [
        (130429, 400, None, 5),
        (130429, 429, 17, 17),
        (131048, 400, None, 60),
        (131056, 400, None, 6),
        (80007, 400, None, 60),
    ],
)
async def test_rate_limits_retry_after_their_pause(
    server: WhatsAppTestServer,
    provider: WhatsAppProvider,
    code: int,
    status: int,
    retry_after: int | None,
    expected: int,
) -> None:
    server.reply_with(whatsapp_error(code, status=status, retry_after=retry_after))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "WHATSAPP_RATE_LIMITED", retryable=True)
    assert outcome.retry_after_seconds == expected
    assert outcome.detail == f"whatsapp_{code}"
    assert outcome.not_sent == "provider"


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retried(
    server: WhatsAppTestServer, provider: WhatsAppProvider, status: int
) -> None:
    server.reply_with(ChatReply(status=status, body=b"<html>upstream</html>"))
    outcome = await provider.send(_message())
    _assert_failure(outcome, "WHATSAPP_TRANSPORT", retryable=True)
    assert outcome.detail == f"http_{status}"
    assert outcome.not_sent == ("provider" if status == 503 else None)


async def test_a_service_error_code_is_retried(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    server.reply_with(whatsapp_error(131000, status=500, message="Something went wrong"))
    _assert_failure(await provider.send(_message()), "WHATSAPP_TRANSPORT", retryable=True)


async def test_a_wrong_token_is_a_configuration_error(server: WhatsAppTestServer) -> None:
    """190 (the server's own check of the bearer token): fixable by the operator, so retried, and
    certainly not sent."""
    provider = WhatsAppProvider(_settings(server.api_url, whatsapp_token="EAAwrong-token"))
    outcome = await provider.send(_message())
    await provider.aclose()
    _assert_failure(outcome, "WHATSAPP_AUTH", retryable=True)
    assert outcome.detail == "whatsapp_190"
    assert outcome.provider_status == "401"
    assert outcome.not_sent == "provider"


@pytest.mark.parametrize("code", [10, 200, 131031, 131042])
async def test_permission_and_account_refusals_are_configuration_errors(
    server: WhatsAppTestServer, provider: WhatsAppProvider, code: int
) -> None:
    server.reply_with(whatsapp_error(code, status=403))
    _assert_failure(await provider.send(_message()), "WHATSAPP_AUTH", retryable=True)


async def test_a_parameter_count_meta_does_not_expect_is_a_template_refusal(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    """The server's own check: the approved template takes 3 parameters, this message has 2."""
    template = TemplateCall(name="fee_reminder", language="en", parameters=("a", "b"))
    outcome = await provider.send(_message(template=template))
    _assert_failure(outcome, "WHATSAPP_TEMPLATE", retryable=False)
    assert outcome.detail == "whatsapp_132000"


async def test_a_template_meta_does_not_have_is_a_template_refusal(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    template = TemplateCall(name="unapproved", language="en", parameters=())
    outcome = await provider.send(_message(template=template))
    _assert_failure(outcome, "WHATSAPP_TEMPLATE", retryable=False)
    assert outcome.detail == "whatsapp_132001"


async def test_the_wrong_phone_number_id_is_rejected(server: WhatsAppTestServer) -> None:
    provider = WhatsAppProvider(_settings(server.api_url, whatsapp_phone_number_id="999"))
    outcome = await provider.send(_message())
    await provider.aclose()
    _assert_failure(outcome, "WHATSAPP_REJECTED", retryable=False)
    assert outcome.detail == "whatsapp_100"


async def test_an_unreadable_success_is_still_sent(
    server: WhatsAppTestServer, provider: WhatsAppProvider
) -> None:
    """A 200 means Meta took (and bills) the message: a retry would send a second one."""
    server.reply_with(ChatReply(status=200, body=b"not json"))
    outcome = await provider.send(_message())
    assert outcome.outcome == "sent" and outcome.provider_message_id is None


async def test_an_unreachable_api_is_a_retryable_transport_failure() -> None:
    url = f"http://127.0.0.1:{smtp_free_port()}/v21.0"
    provider = WhatsAppProvider(_settings(url))
    outcome = await provider.send(_message())
    await provider.aclose()
    _assert_failure(outcome, "WHATSAPP_TRANSPORT", retryable=True)
    assert outcome.not_sent == "provider"


# -- secrets ---------------------------------------------------------------------------------------


async def test_the_token_and_the_number_stay_out_of_logs_and_outcomes(
    server: WhatsAppTestServer, provider: WhatsAppProvider, caplog: pytest.LogCaptureFixture
) -> None:
    server.reply_with(
        whatsapp_error(131026, message=f"token {WHATSAPP_TOKEN} to {NUMBER}"),
        whatsapp_error(190, status=401, message=f"Invalid token {WHATSAPP_TOKEN}"),
    )
    with caplog.at_level(logging.DEBUG):
        outcomes = [await provider.send(_message()) for _ in range(3)]
    assert [o.outcome for o in outcomes] == ["failed", "failed", "sent"]
    text = caplog.text + repr(outcomes)
    assert WHATSAPP_TOKEN not in text
    assert "9812345678" not in text
    assert "Aarav" not in text  # a parameter value is the message's words


async def test_herald_devs_outbox_names_the_template_it_would_send() -> None:
    """`herald dev` mocks WhatsApp: the outbox shows the approved template's name and language
    beside the text the kind words it with."""
    from herald.channels.mock import MockProvider
    from herald.demo.web import read_outbox

    settings = Settings(whatsapp_provider="mock")
    providers = build_providers(settings)
    mock = providers["whatsapp"]
    assert isinstance(mock, MockProvider)
    await mock.send(_message())
    outbox = read_outbox(settings, providers)
    [channel] = [c for c in outbox.channels if c.channel == "whatsapp"]
    [shown] = channel.messages
    assert (shown.to, shown.title) == (NUMBER, "template fee_reminder (en)")
    assert shown.body.startswith("A fee of NPR 12,500")
