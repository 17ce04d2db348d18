"""Slack and Microsoft Teams, the staff channels (issue 46), end to end: destinations set and
refused through the directory API, and an event sent on both through the worker arriving at
local servers speaking chat.postMessage and a Teams webhook."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.slack import SlackProvider
from herald.channels.teams import TeamsProvider
from herald.config import Settings
from herald.db import schema as s
from herald.directory import service as directory
from herald.errors import ValidationFailed
from herald.secrets.vault import Vault
from tests.integration.test_delivery import deliver, delivery_rows
from tests.integration.test_directory import Headers, error_code, person_rows
from tests.integration.test_fanout import run_to_completion, send_event
from tests.providers.servers import ChatTestServer, slack_error, slack_server, teams_server

BOT_TOKEN = "xoxb-2222222222-3333333333-StaffChatIntegrationSecret"
STAFF = {"title": "Staff meeting moved", "message": "Now at 15:30 <in the library> & after"}


@pytest.fixture
def settings(settings: Settings, tmp_path: Any) -> Settings:
    # The local Teams receiver is on 127.0.0.1 over http: allowed as `herald dev` allows it.
    return settings.model_copy(
        update={"webhook_allow_loopback": True, "max_attempts": 3, "data_dir": tmp_path}
    )


@pytest.fixture
def slack() -> Iterator[ChatTestServer]:
    with slack_server(BOT_TOKEN) as running:
        yield running


@pytest.fixture
def teams() -> Iterator[ChatTestServer]:
    with teams_server() as running:
        yield running


def _chat_settings(settings: Settings, slack: ChatTestServer) -> Settings:
    return settings.model_copy(
        update={
            "slack_provider": "slack",
            "slack_bot_token": BOT_TOKEN,
            "slack_base_url": slack.api_url,
            "teams_provider": "teams",
        }
    )


# -- the directory ---------------------------------------------------------------------------------


async def test_destinations_are_stored_and_a_new_one_resets_reachability(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers, teams: ChatTestServer
) -> None:
    """A Slack id and a Teams webhook URL (through the SSRF guard) are stored on the person; a
    destination marked unreachable stays so while it is re-sent, and a different one clears it."""
    url = teams.webhook_url("asha")
    body = {"fullName": "Asha", "slackId": "U0123ABCDEF", "teamsWebhookUrl": url}
    answer = await client.put("/v1/people/asha", json=body, headers=auth)
    assert answer.status_code == 201, answer.text
    assert url not in answer.text  # never shown back
    (row,) = await person_rows(engine, tenant)
    assert (row.slack_id, row.teams_webhook_url) == ("U0123ABCDEF", url)
    assert (row.slack_can_write, row.teams_can_write) == (True, True)

    async with engine.begin() as conn:
        await conn.execute(
            s.person.update()
            .where(s.person.c.tenant_id == tenant)
            .values(slack_can_write=False, teams_can_write=False)
        )
    await client.put("/v1/people/asha", json=body, headers=auth)
    (row,) = await person_rows(engine, tenant)
    assert (row.slack_can_write, row.teams_can_write) == (False, False)
    changed = {**body, "slackId": "C0123ABCDEF", "teamsWebhookUrl": teams.webhook_url("asha-2")}
    await client.put("/v1/people/asha", json=changed, headers=auth)
    (row,) = await person_rows(engine, tenant)
    assert (row.slack_can_write, row.teams_can_write) == (True, True)

    batch = {"people": [{"externalId": "bina", "slackId": "W0123ABCDEF"}]}
    answer = await client.post("/v1/people:batch", json=batch, headers=auth)
    assert answer.status_code == 200, answer.text
    assert [r.slack_id for r in await person_rows(engine, tenant)] == [
        "C0123ABCDEF",
        "W0123ABCDEF",
    ]


@pytest.mark.parametrize(
    "slack_id",
    ["#general", "@asha", "u0123abcdef", "X0123ABCDEF", "U0123", "U" + "A" * 21, "U0123ABC DEF"],
)
async def test_a_slack_id_of_the_wrong_shape_is_422(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers, slack_id: str
) -> None:
    answer = await client.put("/v1/people/asha", json={"slackId": slack_id}, headers=auth)
    assert answer.status_code == 422, answer.text
    assert error_code(answer) == "REQUEST_MALFORMED"
    assert await person_rows(engine, tenant) == []


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("ftp://teams.example/hook", "REQUEST_MALFORMED"),
        ("not a url", "REQUEST_MALFORMED"),
        ("https://10.0.0.7/webhookb2/x", "WEBHOOK_URL_FORBIDDEN"),
        ("https://169.254.169.254/latest/meta-data", "WEBHOOK_URL_FORBIDDEN"),
        ("https://user:pw@teams.example/hook", "WEBHOOK_URL_INVALID"),
        ("https://does-not-exist.invalid/hook", "WEBHOOK_URL_UNRESOLVABLE"),
    ],
)
async def test_a_teams_webhook_the_guard_refuses_stores_nothing(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers, url: str, code: str
) -> None:
    """Bad input: 400/422 with a code, nothing stored, and the URL not echoed back."""
    batch = {
        "people": [
            {"externalId": "ok", "fullName": "Fine"},
            {"externalId": "asha", "teamsWebhookUrl": url},
        ]
    }
    answer = await client.post("/v1/people:batch", json=batch, headers=auth)
    assert answer.status_code in (400, 422), answer.text
    assert error_code(answer) == code
    if code.startswith("WEBHOOK_"):
        assert "asha" in answer.json()["error"]["message"]
        assert url not in answer.text
    assert await person_rows(engine, tenant) == []


async def test_loopback_is_refused_unless_allowed(
    engine: AsyncEngine, tenant: str, settings: Settings, teams: ChatTestServer
) -> None:
    person = directory.PersonInput(teams_webhook_url=teams.webhook_url("asha"))
    strict = settings.model_copy(update={"webhook_allow_loopback": False})
    async with engine.connect() as conn:
        with pytest.raises(ValidationFailed) as caught:
            await directory.upsert_person(conn, tenant, "asha", person, settings=strict)
        await conn.rollback()
    assert caught.value.code == "WEBHOOK_URL_FORBIDDEN"


# -- through the worker ----------------------------------------------------------------------------


def _asha_slack(tenant: str) -> str:
    # Unique per test too (a member id: U, then upper-case letters and digits).
    return "U0" + tenant.removeprefix("t-").upper()


def _bina_hook(teams: ChatTestServer, tenant: str) -> str:
    # Unique per test: the table scans below read every tenant's rows.
    return teams.webhook_url(f"bina-{tenant}")


async def _staff(client: AsyncClient, auth: Headers, teams: ChatTestServer, tenant: str) -> None:
    people = [
        {"externalId": "asha", "fullName": "Asha", "slackId": _asha_slack(tenant)},
        {
            "externalId": "bina",
            "fullName": "Bina",
            "teamsWebhookUrl": _bina_hook(teams, tenant),
        },
        {"externalId": "chet", "fullName": "Chet"},  # neither: skipped, no destination
    ]
    answer = await client.post("/v1/people:batch", json={"people": people}, headers=auth)
    assert answer.status_code == 200, answer.text


@pytest.fixture
async def staff(client: AsyncClient, auth: Headers, teams: ChatTestServer, tenant: str) -> None:
    """Asha on Slack, Bina on Teams and Chet on neither, in the test's tenant."""
    await _staff(client, auth, teams, tenant)


async def _send_staff_notice(engine: AsyncEngine, tenant: str) -> None:
    await send_event(
        engine,
        tenant,
        kind="staff.notice",
        audience={"kind": "users", "userIds": ["asha", "bina", "chet"]},
        channels=["slack", "teams"],
        variables=STAFF,
        action_url="https://school.example/staff/7",
    )
    await run_to_completion(engine, tenant)


@dataclass
class StaffChat:
    """The worker's two staff providers of one test, speaking to the local Slack and Teams."""

    engine: AsyncEngine
    vault: Vault
    settings: Settings
    tenant: str
    slack: SlackProvider
    teams: TeamsProvider

    async def deliver(self) -> tuple[int, int]:
        """One batch on Slack, then one on Teams; how many deliveries each took."""
        on_slack = await deliver(self.engine, self.slack, self.vault, self.settings, self.tenant)()
        on_teams = await deliver(self.engine, self.teams, self.vault, self.settings, self.tenant)()
        return on_slack, on_teams


@pytest.fixture
async def chat(
    engine: AsyncEngine, vault: Vault, settings: Settings, tenant: str, slack: ChatTestServer
) -> AsyncIterator[StaffChat]:
    configured = _chat_settings(settings, slack)
    providers = SlackProvider(configured), TeamsProvider(configured)
    try:
        yield StaffChat(engine, vault, configured, tenant, *providers)
    finally:
        for provider in providers:
            await provider.aclose()


@pytest.mark.usefixtures("staff")
async def test_a_staff_notice_arrives_in_slack_and_teams(
    engine: AsyncEngine, tenant: str, chat: StaffChat, slack: ChatTestServer, teams: ChatTestServer
) -> None:
    """The black-box check: an event on slack and teams to seeded staff reaches the local Slack
    Web API and the Teams webhook, rendered and escaped; each delivery is sent with a masked
    hint; a person with no destination is skipped_no_destination."""
    await _send_staff_notice(engine, tenant)
    # Three each: one sent, two with nowhere to go on that channel.
    assert await chat.deliver() == (3, 3)

    [posted] = slack.requests
    assert posted.headers["authorization"] == f"Bearer {BOT_TOKEN}"
    sent = posted.json()
    assert sent["channel"] == _asha_slack(tenant)
    assert sent["blocks"][0]["text"]["text"] == "Staff meeting moved"
    assert sent["blocks"][1]["text"]["text"] == ("Now at 15:30 &lt;in the library&gt; &amp; after")
    assert sent["blocks"][2]["elements"][0]["url"] == "https://school.example/staff/7"

    [card_post] = teams.requests
    assert card_post.path == _bina_hook(teams, tenant).removeprefix(teams.base_url)
    card = card_post.json()["attachments"][0]["content"]
    assert card["body"][1]["inlines"][0]["text"] == STAFF["message"]
    assert card["actions"][0]["url"] == "https://school.example/staff/7"

    rows = {
        (r["channel"], r["status"], r["destination_hint"])
        for r in await delivery_rows(engine, tenant)
    }
    assert ("slack", "sent", f"slack:U…{_asha_slack(tenant)[-3:]}") in rows
    assert ("teams", "sent", "teams:127.0.0.1") in rows
    assert ("slack", "skipped_no_destination", None) in rows
    assert ("teams", "skipped_no_destination", None) in rows
    slack_row = next(
        r for r in await delivery_rows(engine, tenant) if r["channel"] == "slack" and r["sent_at"]
    )
    assert re.fullmatch(r"\d+\.\d+", str(slack_row["provider_message_id"]))  # Slack's ts


@pytest.mark.usefixtures("staff")
async def test_a_gone_destination_is_dead_and_later_sends_skip_it(
    engine: AsyncEngine, tenant: str, chat: StaffChat, slack: ChatTestServer, teams: ChatTestServer
) -> None:
    """channel_not_found and a deleted webhook (404) are permanent: the deliveries are dead with
    the code, the person's destination is marked unreachable, and the next event skips it
    without calling the provider; no secret is in any recorded error."""
    slack.reply_with(slack_error("channel_not_found"))
    teams.gone.add(_bina_hook(teams, tenant).removeprefix(teams.base_url))
    await _send_staff_notice(engine, tenant)
    await chat.deliver()
    dead = {
        r["channel"]: r["last_error"]
        for r in await delivery_rows(engine, tenant)
        if r["status"] == "dead"
    }
    assert dead["slack"].startswith("SLACK_UNREACHABLE")
    assert dead["teams"].startswith("TEAMS_UNREACHABLE")
    for error in dead.values():
        assert (
            BOT_TOKEN not in error
            and "webhook/bina" not in error
            and "IncomingWebhook" not in error
        )

    async with engine.connect() as conn:
        flags = (
            await conn.execute(
                select(
                    s.person.c.external_id,
                    s.person.c.slack_can_write,
                    s.person.c.teams_can_write,
                )
                .where(s.person.c.tenant_id == tenant)
                .order_by(s.person.c.external_id)
            )
        ).all()
    assert [tuple(f) for f in flags] == [
        ("asha", False, True),
        ("bina", True, False),
        ("chet", True, True),
    ]

    calls = len(slack.requests), len(teams.requests)
    await send_event(
        engine,
        tenant,
        kind="staff.notice",
        audience={"kind": "users", "userIds": ["asha", "bina"]},
        channels=["slack", "teams"],
        variables={"title": "Again", "message": "Second notice"},
    )
    await run_to_completion(engine, tenant)
    await chat.deliver()
    assert (len(slack.requests), len(teams.requests)) == calls
    statuses = [r["status"] for r in await delivery_rows(engine, tenant)]
    # Four from the first event (no destination on that channel), all four of the second.
    assert statuses.count("skipped_no_destination") == 4 + 4


@pytest.mark.usefixtures("staff")
async def test_erasure_takes_the_chat_destinations(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    auth: Headers,
    chat: StaffChat,
    teams: ChatTestServer,
) -> None:
    """R-ERASE-1 for the staff channels: after a notice was sent on both, erasing the people
    leaves their Slack id and Teams webhook URL in no table, and no delivery keeps a hint."""
    from tests.integration.test_secrets import tables_containing

    await _send_staff_notice(engine, tenant)
    await chat.deliver()
    webhook_path = _bina_hook(teams, tenant).removeprefix(teams.base_url)
    assert await tables_containing(engine, webhook_path) == ["person.teams_webhook_url"]

    for who in ("asha", "bina"):
        answer = await client.post(f"/v1/people/{who}/erase", headers=auth)
        assert answer.status_code == 200, answer.text
    assert await tables_containing(engine, webhook_path) == []
    assert await tables_containing(engine, _asha_slack(tenant)) == []
    sent = [r for r in await delivery_rows(engine, tenant) if r["sent_at"] is not None]
    assert len(sent) == 2 and {r["destination_hint"] for r in sent} == {None}


# -- templates -------------------------------------------------------------------------------------


async def test_an_operator_override_is_previewed_and_sent_on_slack_and_teams(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    chat: StaffChat,
    slack: ChatTestServer,
    teams: ChatTestServer,
) -> None:
    """Slack and Teams wording takes operator overrides like the other channels: a title is
    required, the preview renders the samples as plain text, and once published the worker sends
    the override — escaped for Slack by the provider, as written in the Teams card."""
    from herald.auth.service import create_api_key

    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["admin", "directory:write"])
    admin = {"Authorization": f"Bearer {key}"}
    base = "/v1/admin/templates"
    wording = {"kind": "staff.notice", "locale": "en", "title": "Staff: {{title}}"}
    wording["body"] = "{{message}} <for {{name}}>"

    untitled = await client.post(
        base, json={**wording, "channel": "slack", "title": None}, headers=admin
    )
    assert untitled.status_code == 400, untitled.text
    assert error_code(untitled) == "NOTIFICATION_TEMPLATE_TITLE_REQUIRED"

    preview = await client.post(
        f"{base}/preview", json={**wording, "channel": "teams"}, headers=admin
    )
    assert preview.status_code == 200, preview.text
    assert preview.json()["title"] == "Staff: Staff meeting moved"
    assert preview.json()["body"] == "It is now at 15:30 in the library. <for Sita Sharma>"

    for channel in ("slack", "teams"):
        created = await client.post(base, json={**wording, "channel": channel}, headers=admin)
        assert created.status_code == 201, created.text
        published = await client.post(
            f"{base}/{created.json()['id']}/publish", json={"version": 1}, headers=admin
        )
        assert published.status_code == 200, published.text

    await _staff(client, admin, teams, tenant)
    await _send_staff_notice(engine, tenant)
    await chat.deliver()
    blocks = slack.requests[0].json()["blocks"]
    assert blocks[0]["text"]["text"] == "Staff: Staff meeting moved"
    assert blocks[1]["text"]["text"] == (
        "Now at 15:30 &lt;in the library&gt; &amp; after &lt;for Asha&gt;"
    )
    card = teams.requests[0].json()["attachments"][0]["content"]
    assert card["body"][0]["inlines"][0]["text"] == "Staff: Staff meeting moved"
    assert card["body"][1]["inlines"][0]["text"] == f"{STAFF['message']} <for Bina>"
    versions = {r["template_version"] for r in await delivery_rows(engine, tenant) if r["sent_at"]}
    assert versions == {2}


async def test_the_people_import_sets_slack_ids_and_a_rerun_changes_nothing(
    engine: AsyncEngine, tenant: str, tmp_path: Any
) -> None:
    """`herald people import` takes the same fields: a CSV's slackId column is stored, a second
    run counts the rows unchanged, and a Slack id of the wrong shape rejects its line only."""
    from herald.directory import importer

    path = tmp_path / "staff.csv"
    path.write_text(
        "externalId,fullName,slackId\nasha,Asha,U0123ABCDEF\nbina,Bina,C0123ABCDEF\n"
        "chet,Chet,#staff-room\n",
        encoding="utf-8",
    )
    first = await importer.import_file(engine, tenant, path)
    assert (first.tallies["person"].created, [r.line for r in first.rejected]) == (2, [4])
    assert [r.slack_id for r in await person_rows(engine, tenant)] == [
        "U0123ABCDEF",
        "C0123ABCDEF",
    ]
    again = await importer.import_file(engine, tenant, path)
    assert again.tallies["person"].unchanged == 2 and again.tallies["person"].updated == 0
