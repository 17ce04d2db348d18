"""The operator console in a real browser (headless Chromium under Playwright, as the demo page's
tests drive it): sign in from the link `herald dev` prints, find an event, read why a parent's
email was not sent, replay a dead letter and watch its new state arrive, edit and preview an
override, and what an operator without dead-letter permissions sees.

Every test talks to one `herald dev` process with a database of this module's own. On a failure
the page's screenshot is saved under test-artifacts/ and named in the report.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
import pytest

from herald.db.engine import libpq_url
from herald.demo.school import SCHOOL, STUDENTS
from tests.conftest import create_database, drop_database
from tests.e2e.harness import (
    WAIT_MS,
    HeraldProcess,
    Tab,
    banner_value,
    evidence,
    free_port,
    open_tab,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# A guardian of 7A who switches announcement email off; and one who keeps it (the mock sends).
SWITCHED_OFF = "gita-shrestha"
MOCKED = "ramesh-shrestha"
# What a page for an operator must never carry: names, addresses, the message itself.
PERSONAL = (
    "Gita Shrestha",
    "Ramesh Shrestha",
    "ramesh.shrestha@example.com",
    "gita.shrestha@example.com",
    "+9779840000001",
)


@dataclass(frozen=True)
class ConsoleDev:
    base_url: str
    api_key: str
    database_url: str
    operator_link: str
    approver_link: str

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.api_key}", **kwargs.pop("headers", {})}
        return httpx.request(
            method, f"{self.base_url}{path}", headers=headers, timeout=10, **kwargs
        )


@pytest.fixture(scope="module")
def dev(
    e2e_env: dict[str, str], server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleDev]:
    folder = tmp_path_factory.mktemp("console")
    name = f"herald_console_{uuid.uuid4().hex[:10]}"
    database_url = create_database(server_url, name)
    env = {**e2e_env, "HERALD_DATABASE_URL": database_url, "HERALD_DATA_DIR": str(folder / "d")}
    process = HeraldProcess(["dev", "--port", str(free_port())], env, folder / "dev.log")
    try:
        text = process.wait_for_output("Ctrl-C stops.")
        links = [
            line.split()[1] for line in text.splitlines() if line.strip().startswith("console ")
        ]
        assert len(links) == 2, text
        yield ConsoleDev(
            base_url=banner_value("API", text),
            api_key=banner_value("API key", text),
            database_url=database_url,
            operator_link=links[0],
            approver_link=links[1],
        )
    finally:
        status = process.stop(signal.SIGINT)
        drop_database(server_url, name)
    assert status == 0, process.describe()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    """Wider than the conftest's tab: the console's tables are laid out for a desktop."""
    with open_tab(browser, 1440, 900) as opened:
        yield opened


def _sign_in(page: Page, link: str) -> None:
    """Open the printed link: console.js moves the token from the fragment into the form."""
    page.goto(link)
    page.wait_for_url("**/console/history")
    assert "#token=" not in page.url


def _wait(predicate: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.fixture(scope="module")
def event(dev: ConsoleDev) -> str:
    """Gita switches announcement email off; an announcement goes to 7A's guardians and is fanned
    out and sent (the mock records Ramesh's email and sends nothing)."""
    token = httpx.post(
        f"{dev.base_url}/dev/token",
        json={"externalId": SWITCHED_OFF, "role": "guardian"},
        timeout=10,
    ).json()["token"]
    mine = {"Authorization": f"Bearer {token}"}
    version = httpx.get(f"{dev.base_url}/v1/me/preferences", headers=mine, timeout=10).json()
    saved = httpx.put(
        f"{dev.base_url}/v1/me/preferences",
        headers=mine,
        json={
            "version": version["version"],
            "overrides": [{"category": "announcement", "channel": "email", "enabled": False}],
        },
        timeout=10,
    )
    assert saved.status_code == 200, saved.text
    sent = dev.api(
        "POST",
        "/v1/events",
        json={
            "kind": "announcement.posted",
            "audience": {"kind": "guardians_of_group", "groupIds": ["class-7a"]},
            "channels": ["in_app", "email"],
            "variables": {"title": f"Console check {uuid.uuid4().hex[:6]}", "message": "Words"},
        },
    )
    assert sent.status_code == 201, sent.text
    event_id: str = sent.json()["id"]

    def settled() -> bool:
        answer = dev.api("GET", f"/v1/admin/events/{event_id}")
        counts = answer.json()["deliveryCounts"]
        return answer.json()["state"] == "completed" and not (
            counts.get("queued") or counts.get("processing")
        )

    _wait(settled, "the announcement to be fanned out and sent")
    return event_id


def test_find_the_event_and_read_why_email_was_off(dev: ConsoleDev, event: str, tab: Tab) -> None:
    page = tab.page
    with evidence(tab, "console-trace"):
        _sign_in(page, dev.operator_link)
        page.click(f'a[href="/console/events/{event}"]')
        page.wait_for_url(f"**/console/events/{event}")
        page.fill("#lookup", SWITCHED_OFF)
        page.get_by_role("button", name="Trace").click()
        page.wait_for_url(f"**/console/events/{event}/people/{SWITCHED_OFF}")
        reason = page.locator('.reason[data-channel="email"]').inner_text()
        assert "email off for announcement" in reason, reason
        assert "as their preferences stand now" in reason
        # Times in the operator's zone, UTC on hover.
        assert "UTC" in (page.locator("time").first.get_attribute("title") or "")
        # The mock's "send" is said for what it is, not as a delivery.
        page.goto(f"{dev.base_url}/console/events/{event}/people/{MOCKED}")
        mocked = page.locator('.reason[data-channel="email"]').inner_text()
        assert mocked.startswith("Mock provider, not delivered"), mocked


def _dead_letter(dev: ConsoleDev, event: str) -> None:
    """Ramesh's email of the event dies as a provider refusal would leave it."""
    with psycopg.connect(libpq_url(dev.database_url)) as conn:
        row = conn.execute(
            "UPDATE notification_delivery d SET status = 'dead', skipped_at = NULL, "
            "       failed_at = now(), dead_at = now(), attempts = 1, "
            "       last_error = 'EMAIL_REJECTED' "
            "  FROM notification_event e, notification_recipient r, person p "
            " WHERE e.public_id = %s AND d.event_id = e.id AND d.channel = 'email' "
            "   AND r.id = d.recipient_id AND p.id = r.user_id AND p.external_id = %s "
            "RETURNING d.public_id",
            (event, MOCKED),
        ).fetchone()
        assert row is not None
        conn.execute(
            "INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, "
            "attempts, last_error) VALUES (%s, 'notification.email', 'channel_send', %s, %s, 1, "
            "'EMAIL_REJECTED')",
            (
                SCHOOL.tenant_id,
                str(row[0]),
                json.dumps({"notificationDeliveryPublicId": str(row[0]), "channel": "email"}),
            ),
        )


def test_replay_a_dead_letter_and_see_its_new_state(dev: ConsoleDev, event: str, tab: Tab) -> None:
    _dead_letter(dev, event)
    page = tab.page
    with evidence(tab, "console-replay"):
        _sign_in(page, dev.operator_link)
        page.get_by_role("link", name="Dead letters").click()
        page.wait_for_url("**/console/dead-letters")
        page.get_by_role("button", name="Replay").first.click()
        page.get_by_text("Replayed just now.").wait_for()
        # The new delivery's state arrives without a reload: the worker picks it up and the mock
        # skips it (it sends nothing), and the fragment stops polling there.
        status = page.locator(".delivery-status [data-status]")
        _wait(
            lambda: status.get_attribute("data-status") not in (None, "queued", "processing"),
            "the replayed delivery to settle",
        )
        assert status.get_attribute("data-status") == "skipped_unconfigured"
        page.reload()
        assert "Replayed" in page.locator("tbody").inner_text()


def test_edit_and_preview_an_override(dev: ConsoleDev, tab: Tab) -> None:
    page = tab.page
    with evidence(tab, "console-override"):
        _sign_in(page, dev.operator_link)
        page.get_by_role("link", name="Templates").click()
        page.locator(
            'a[href="/console/templates/new?kind=announcement.posted&channel=email&locale=en"]'
        ).click()
        page.locator("#preview-body").wait_for()
        page.fill("#o-title", "{{title}} from the office")
        page.fill("#o-body", "Dear {{name}}, {{message}} (override preview)")
        page.wait_for_function(
            "() => document.getElementById('preview-body')"
            " && document.getElementById('preview-body').textContent.includes('override preview')"
        )
        assert "from the office" in page.locator("#preview-title").inner_text()
        page.get_by_role("button", name="Save as draft").click()
        page.wait_for_url("**/console/templates/*")
        assert page.locator("#override-status").inner_text() == "draft"
        page.get_by_role("button", name="Publish").click()
        page.wait_for_function(
            "() => document.getElementById('override-status').textContent === 'published'"
        )
        history = page.locator("details summary").all_inner_texts()
        assert [entry.split(" · ")[0] for entry in history] == ["publish", "create"]


def test_an_operator_without_failure_permissions_sees_no_dead_letters(
    dev: ConsoleDev, event: str, tab: Tab
) -> None:
    page = tab.page
    with evidence(tab, "console-approver", expected=("404",)):
        _sign_in(page, dev.approver_link)
        assert page.get_by_role("link", name="Dead letters").count() == 0
        answer = page.goto(f"{dev.base_url}/console/dead-letters")
        assert answer is not None and answer.status == 404
        # A replay by URL is a 404 too, CSRF token and all.
        page.goto(f"{dev.base_url}/console/history")
        status = page.evaluate(
            """async () => {
                const csrf = document.querySelector('input[name=csrf]').value;
                const answer = await fetch('/console/dead-letters/' + crypto.randomUUID() +
                    '/replay', {method: 'POST', headers: {'X-CSRF-Token': csrf}});
                return answer.status;
            }"""
        )
        assert status == 404
        # No name, address or content in any page this role can open.
        for path in (
            "/console/history",
            f"/console/events/{event}",
            f"/console/events/{event}/people/{SWITCHED_OFF}",
            f"/console/events/{event}/people/{MOCKED}",
            f"/console/people?externalId={MOCKED}",
            "/console/feed",
            "/console/outcomes",
        ):
            opened = page.goto(f"{dev.base_url}{path}")
            assert opened is not None and opened.status == 200, path
            html = page.content()
            for personal in (*PERSONAL, "Console check", "Words"):
                assert personal not in html, (path, personal)


def test_a_form_without_the_csrf_token_is_refused(dev: ConsoleDev, tab: Tab) -> None:
    page = tab.page
    with evidence(tab, "console-csrf", expected=("403",)):
        _sign_in(page, dev.operator_link)
        page.evaluate("() => document.querySelector('.sign-out input[name=csrf]').remove()")
        with page.expect_navigation():
            page.get_by_role("button", name="Sign out").click()
        assert "did not come from here" in page.content()
        # Still signed in: the refused form changed nothing.
        answer = page.goto(f"{dev.base_url}/console/history")
        assert answer is not None and answer.status == 200
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url("**/console/sign-in")
        answer = page.goto(f"{dev.base_url}/console/history")
        assert page.url.endswith("/console/sign-in")


@pytest.mark.parametrize("width", [375, 1440])
def test_readable_at_phone_and_desktop_widths(
    dev: ConsoleDev, event: str, browser: Browser, width: int
) -> None:
    """No page scrolls sideways (wide tables scroll inside their own box), and the keyboard
    reaches the skip link first and the navigation next."""
    with (
        open_tab(browser, width, 800, listen=False) as opened,
        evidence(opened, f"console-{width}"),
    ):
        page = opened.page
        _sign_in(page, dev.operator_link)
        for path in ("/console/history", f"/console/events/{event}", "/console/templates"):
            page.goto(f"{dev.base_url}{path}")
            overflow = page.evaluate(
                "() => document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 0, (path, overflow)
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.textContent") == "Skip to content"
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.textContent") == "History"


def test_the_draft_audience_picker_counts_whom_it_reaches(dev: ConsoleDev, tab: Tab) -> None:
    """Pick "the students of the groups", then Class 7A: the count under the picker becomes the
    class's size without a submit; a bad JSON audience shows the draft's refusal code; saving
    stores what was picked, and the saved draft's audience preview agrees with the count."""
    page = tab.page
    size = len(STUDENTS["class-7a"])
    reach = page.locator("#audience-reach")
    with evidence(tab, "console-audience", expected=("status of 400",)):
        _sign_in(page, dev.operator_link)
        page.goto(f"{dev.base_url}/console/broadcasts/new")
        page.wait_for_selector("#audience-reach[data-state='ok']")  # the default: guardians
        page.select_option("#b-audience-kind", "json")
        page.fill("#b-audience", "{not json")
        page.wait_for_selector("#audience-reach[data-state='error']")
        assert reach.inner_text().startswith("NOTIFICATION_BROADCAST_INVALID: audience: ")
        page.select_option("#b-audience-kind", "group")
        assert page.locator("#b-audience-roles").is_hidden()
        page.select_option("#b-audience-groups", ["class-7a"])
        page.wait_for_selector(f"#audience-reach[data-state='ok'][data-count='{size}']")
        assert reach.inner_text() == f"This reaches {size} people."
        page.fill("#b-title", f"Picked {uuid.uuid4().hex[:6]}")
        page.get_by_role("button", name="Save draft").click()
        page.wait_for_url("**/console/broadcasts/*-*")
    broadcast_id = page.url.rsplit("/", 1)[1]
    saved = dev.api("GET", f"/v1/admin/broadcasts/{broadcast_id}")
    assert saved.status_code == 200, saved.text
    assert saved.json()["audience"] == {"kind": "group", "groupIds": ["class-7a"]}
    preview = dev.api("GET", f"/v1/admin/broadcasts/{broadcast_id}/audience-preview")
    assert preview.json()["count"] == size
