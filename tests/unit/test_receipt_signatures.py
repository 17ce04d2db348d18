"""X-Twilio-Signature as Twilio computes it, against the vectors of Twilio's own validator tests,
and the parsing of both providers' callbacks."""

from __future__ import annotations

import json

import pytest

from herald.config import Settings
from herald.receipts import service

URI = "https://mycompany.com/myapp.php?foo=1&bar=2"
PARAMS = [
    ("CallSid", "CA1234567890ABCDE"),
    ("Digits", "1234"),
    ("From", "+14158675309"),
    ("To", "+18005551212"),
    ("Caller", "+14158675309"),
]


def settings(**update: object) -> Settings:
    return Settings().model_copy(update={"twilio_auth_token": "12345", **update})


def test_signature_matches_twilios_vectors() -> None:
    assert service.twilio_signature("12345", URI, PARAMS) == "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    duplicates = [("Sid", "CA123"), ("SidAccount", "AC123"), ("Digits", "5678"), ("Digits", "1234")]
    assert service.twilio_signature("12345", URI, duplicates) == "IK+Dwps556ElfBT0I3Rgjkr1wJU="


def test_port_variants_are_accepted_and_anything_else_refused() -> None:
    """Twilio signs the URL as configured; a proxy may add or drop the port."""
    params = [*PARAMS, ("MessageSid", "SM1"), ("MessageStatus", "delivered")]
    signed = service.twilio_signature("12345", URI, params)
    with_port = URI.replace(".com", ".com:1234")
    assert service.verify_twilio(settings(), with_port, params, signed).status == "delivered"
    ported = service.twilio_signature("12345", URI.replace(".com", ".com:443"), params)
    assert service.verify_twilio(settings(), URI, params, ported).provider_message_id == "SM1"
    for forged in (None, "", signed[:-2] + "A=", service.twilio_signature("54321", URI, params)):
        with pytest.raises(service.ReceiptSignatureInvalid):
            service.verify_twilio(settings(), URI, params, forged)
    tampered = [*params[:-1], ("MessageStatus", "undelivered")]
    with pytest.raises(service.ReceiptSignatureInvalid):
        service.verify_twilio(settings(), URI, tampered, signed)
    # The configured public URL wins over the one the request arrived at.
    public = settings(twilio_status_callback_url=URI)
    assert service.verify_twilio(public, "http://10.0.0.5:8000/x", params, signed).status


def test_unconfigured_is_404() -> None:
    with pytest.raises(service.ReceiptsNotConfigured):
        service.verify_twilio(settings(twilio_auth_token=None), URI, PARAMS, "x")
    with pytest.raises(service.ReceiptsNotConfigured):
        service.verify_resend(Settings(), b"{}", {})


def test_twilio_statuses() -> None:
    def parse(status: str, **extra: str) -> service.Receipt:
        return service.parse_twilio(
            [("MessageSid", "SM9"), ("MessageStatus", status), *extra.items()]
        )

    assert parse("delivered").status == "delivered"
    bounced = parse("undelivered", ErrorCode="30001")
    assert (bounced.status, bounced.code, bounced.hard) == (
        "bounced",
        "SMS_UNDELIVERED (twilio_30001)",
        False,
    )
    unreachable = parse("undelivered", ErrorCode="30003")
    assert (unreachable.code, unreachable.hard) == ("SMS_UNDELIVERED (twilio_30003)", True)
    assert parse("failed", ErrorCode="<script>").code == "SMS_UNDELIVERED"
    assert parse("sent").status is None and parse("queued").status is None
    with pytest.raises(service.ReceiptMalformed):
        service.parse_twilio([("MessageStatus", "delivered")])


def test_resend_events() -> None:
    def parse(kind: str, **data: object) -> service.Receipt:
        return service.parse_resend(
            json.dumps({"type": kind, "data": {"email_id": "re_1", **data}}).encode()
        )

    assert parse("email.delivered").status == "delivered"
    hard = parse("email.bounced", bounce={"type": "Permanent", "subType": "Suppressed"})
    assert (hard.status, hard.code, hard.hard) == ("bounced", "EMAIL_BOUNCED (Suppressed)", True)
    assert parse("email.bounced", bounce={"type": "Transient"}).status is None
    assert parse("email.opened").status is None
    for body in (b"not json", b"[]", b'{"type": "email.delivered", "data": {}}'):
        with pytest.raises(service.ReceiptMalformed):
            service.parse_resend(body)
