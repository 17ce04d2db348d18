"""Meta's X-Hub-Signature-256 and WhatsApp's status webhook: the signature over the raw body,
the subscription handshake, and the statuses onto Herald's receipt vocabulary."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from herald.config import Settings
from herald.receipts import service
from tests.providers.servers import whatsapp_signature, whatsapp_status_webhook

SECRET = "app-secret-for-tests"


def settings(**update: object) -> Settings:
    return Settings().model_copy(
        update={"whatsapp_app_secret": SECRET, "whatsapp_verify_token": "vt-123", **update}
    )


def test_the_signature_is_metas_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"object":"whatsapp_business_account","entry":[]}'
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert service.whatsapp_signature(SECRET, body) == expected == whatsapp_signature(body, SECRET)
    assert service.verify_whatsapp(settings(), body, expected) == []
    # Meta writes lower-case hex; an upper-cased copy is the same digest.
    upper = expected.upper().replace("SHA256", "sha256")
    assert service.verify_whatsapp(settings(), body, upper) == []


@pytest.mark.parametrize(
    "signature",
    [None, "", "sha256=", "sha1=abc", "deadbeef", "sha256=" + "0" * 64],
)
def test_a_missing_or_wrong_signature_is_refused(signature: str | None) -> None:
    body = whatsapp_status_webhook("wamid.1", "delivered")
    with pytest.raises(service.ReceiptSignatureInvalid):
        service.verify_whatsapp(settings(), body, signature)


def test_the_signature_covers_the_exact_bytes() -> None:
    body = whatsapp_status_webhook("wamid.1", "delivered")
    signed = whatsapp_signature(body, SECRET)
    reformatted = json.dumps(json.loads(body), indent=2).encode()  # same JSON, other bytes
    with pytest.raises(service.ReceiptSignatureInvalid):
        service.verify_whatsapp(settings(), reformatted, signed)


def test_without_the_app_secret_receipts_are_not_configured() -> None:
    body = whatsapp_status_webhook("wamid.1", "delivered")
    with pytest.raises(service.ReceiptsNotConfigured):
        service.verify_whatsapp(settings(whatsapp_app_secret=None), body, "sha256=00")


def test_statuses_map_onto_the_receipt_vocabulary() -> None:
    more = [
        {"id": "wamid.2", "status": "read"},
        {"id": "wamid.3", "status": "failed", "errors": [{"code": 131026, "title": "x"}]},
        {"id": "wamid.4", "status": "failed", "errors": [{"code": 131049}]},
        {"id": "wamid.5", "status": "failed"},
        {"id": "wamid.6", "status": "mystery"},
    ]
    receipts = service.parse_whatsapp(whatsapp_status_webhook("wamid.1", "sent", more=more))
    assert [(r.provider_message_id, r.status, r.code, r.hard) for r in receipts] == [
        ("wamid.1", None, None, False),
        ("wamid.2", "delivered", None, False),
        ("wamid.3", "bounced", "WHATSAPP_UNDELIVERED (whatsapp_131026)", True),
        ("wamid.4", "bounced", "WHATSAPP_UNDELIVERED (whatsapp_131049)", False),
        ("wamid.5", "bounced", "WHATSAPP_UNDELIVERED", False),
        ("wamid.6", None, None, False),
    ]
    assert {r.channel for r in receipts} == {"whatsapp"}
    assert receipts[5].provider_status == "other"  # never the provider's free text


def test_the_handshake_echoes_the_challenge_for_the_verify_token_only() -> None:
    assert service.verify_whatsapp_subscription(settings(), "subscribe", "vt-123", "987") == "987"
    with pytest.raises(service.WebhookVerifyTokenInvalid):
        service.verify_whatsapp_subscription(settings(), "subscribe", "vt-124", "987")
    with pytest.raises(service.WebhookVerifyTokenInvalid):
        service.verify_whatsapp_subscription(settings(), "subscribe", None, "987")
    with pytest.raises(service.ReceiptMalformed):
        service.verify_whatsapp_subscription(settings(), "unsubscribe", "vt-123", "987")
    with pytest.raises(service.ReceiptMalformed):
        service.verify_whatsapp_subscription(settings(), "subscribe", "vt-123", "<script>\n")
    with pytest.raises(service.ReceiptsNotConfigured):
        service.verify_whatsapp_subscription(
            settings(whatsapp_verify_token=None), "subscribe", "vt-123", "987"
        )
