"""Provider accounts (issue 46 item 4), the pure pieces: which fields each provider lets a tenant
override, how an account is laid over the deployment's settings, and what a refusal says."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import ValidationError

from herald import vocabulary
from herald.channels import accounts
from herald.channels.providers import build_channel
from herald.config import Settings


def test_the_vocabulary_names_every_provider_with_a_schema() -> None:
    assert set(vocabulary.ACCOUNT_PROVIDERS) == set(accounts.SPECS)
    for spec in accounts.SPECS.values():
        fields = set(spec.schema_.model_fields)
        assert set(spec.settings) == fields, spec.name
        assert spec.secrets <= fields, spec.name
        for target in spec.settings.values():
            assert target in Settings.model_fields, (spec.name, target)


def test_overlay_replaces_only_the_fields_named() -> None:
    base = Settings(_env_file=None, smtp_host="relay.district.example", smtp_port=25)
    overlaid = accounts.overlay(
        base,
        {"smtp": {"host": "mail.school-a.example", "password": "pw"}, "unknown": {"x": 1}},
    )
    assert overlaid.smtp_host == "mail.school-a.example" and overlaid.smtp_password == "pw"
    assert overlaid.smtp_port == 25 and base.smtp_host == "relay.district.example"
    assert accounts.overlay(base, {}) is base


def test_an_unconfigured_channel_takes_the_tenants_provider() -> None:
    """A deployment without email delivers through the tenant's Resend; one that names SMTP, or
    has it configured, keeps SMTP (the account changes its fields only)."""
    empty = Settings(_env_file=None)
    resend = {"resend": {"api_key": "re_x"}}
    assert accounts.overlay(empty, resend).email_provider == "resend"
    assert build_channel(accounts.overlay(empty, resend), "email").name == "resend"
    named = Settings(_env_file=None, email_provider="smtp")
    assert accounts.overlay(named, resend).email_provider == "smtp"
    configured = Settings(_env_file=None, smtp_host="relay.example")
    assert accounts.overlay(configured, resend).email_provider is None
    twilio = {"twilio": {"account_sid": "AC" + "0" * 32, "auth_token": "t", "from_number": "+1"}}
    assert accounts.overlay(empty, twilio).sms_provider == "twilio"


def test_split_keeps_secrets_apart_and_drops_unset_fields() -> None:
    spec = accounts.SPECS["smtp"]
    account = spec.schema_.model_validate({"host": "m.example", "password": "pw", "port": None})
    assert accounts.split(spec, account) == ({"host": "m.example"}, {"password": "pw"})


@pytest.mark.parametrize(
    ("provider", "fields"),
    [
        ("smtp", {"password": "SECRET-VALUE\nRSET"}),
        ("smtp", {"passwrd": "SECRET-VALUE"}),
        ("slack", {"botToken": "SECRET-VALUE"}),
        ("fcm", {"serviceAccountJson": '{"private_key": "SECRET-VALUE"}'}),
        ("fcm", {"serviceAccountJson": "SECRET-VALUE not json"}),
    ],
)
def test_a_refusal_names_the_rule_never_the_value(provider: str, fields: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as refused:
        accounts.SPECS[provider].schema_.model_validate(fields)
    errors = refused.value.errors(include_input=False, include_url=False, include_context=False)
    assert "SECRET-VALUE" not in json.dumps(errors, default=str)


def test_a_tenants_fcm_service_account_configures_its_push() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    text = json.dumps(
        {"project_id": "school-a", "client_email": "push@school-a.example", "private_key": pem}
    )
    spec = accounts.SPECS["fcm"]
    account = spec.schema_.model_validate({"serviceAccountJson": text, "projectId": "school-a-1"})
    plain, secret = accounts.split(spec, account)
    base = Settings(_env_file=None, push_provider="fcm")
    push = build_channel(accounts.overlay(base, {"fcm": {**plain, **secret}}), "push")
    assert push.is_configured()
