"""The demo page and the outbox of `herald dev`, in a real browser (headless Chromium).

The browser is Debian's `chromium` (/usr/bin/chromium) driven by Playwright for Python; no
browser is downloaded. Without either, the browser tests skip and say why; the HTTP checks of the
dev-only routes run regardless. On a failure the page's screenshot is saved under test-artifacts/
and its path added to the failure report; a passing run leaves screenshots of the working pages
there too (demo-page.png, demo-outbox.png).

Every test talks to one `herald dev` process over a database of this module's own, shared by its
tests in file order: counts are taken relative to what the page shows first, and every
announcement carries a unique title (the announcement kind folds identical ones into one event).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from herald.demo import web
from tests.conftest import create_database, drop_database
from tests.e2e.harness import (
    WAIT_MS,
    HeraldProcess,
    Tab,
    banner_value,
    evidence,
    free_port,
    screenshot,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

GUARDIAN = ("ramesh-shrestha", "guardian")  # in 7A and 8A; push, Telegram and an SMS opt-in
GUARDIAN_PHONE = "+9779840000001"
GUARDIAN_PUSH_TOKEN = "demo-push-token-ramesh-android"
GUARDIAN_TELEGRAM = "100200300"
GUARDIAN_EMAIL = "ramesh.shrestha@example.com"
ALL_CHANNELS = ["in_app", "email", "push", "sms", "telegram"]


# ---------------------------------------------------------------------------------------------
# `herald dev`


@dataclass(frozen=True)
class Dev:
    base_url: str
    api_key: str
    process: HeraldProcess

    def send(self, title: str, *, group: str, channels: list[str], message: str) -> str:
        """POST /v1/events as the printed curl command does; returns the new event's id."""
        answer = httpx.post(
            f"{self.base_url}/v1/events",
            headers={"Authorization": f"Bearer {self.api_key}"},
            json={
                "kind": "announcement.posted",
                "audience": {"kind": "guardians_of_group", "groupIds": [group]},
                "channels": channels,
                "variables": {"title": title, "message": message},
            },
            timeout=10,
        )
        assert answer.status_code == 201, answer.text
        event_id: str = answer.json()["id"]
        return event_id

    def token(self, external_id: str, role: str) -> str:
        answer = httpx.post(
            f"{self.base_url}/dev/token",
            json={"externalId": external_id, "role": role},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        token: str = answer.json()["token"]
        return token


@pytest.fixture(scope="module")
def dev(
    e2e_env: dict[str, str], server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Dev]:
    """`herald dev` on a free port, with a data folder and a database of its own (it migrates
    it), so this module's inboxes and preferences never meet test_dev.py's demo school; stopped
    with Ctrl-C."""
    folder = tmp_path_factory.mktemp("demo-page")
    name = f"herald_demo_page_{uuid.uuid4().hex[:10]}"
    env = {
        **e2e_env,
        "HERALD_DATABASE_URL": create_database(server_url, name),
        "HERALD_DATA_DIR": str(folder / "data"),
    }
    port = free_port()
    process = HeraldProcess(["dev", "--port", str(port)], env, folder / "dev.log")
    try:
        text = process.wait_for_output("Ctrl-C stops.")
        base_url = banner_value("API", text)
        assert banner_value("demo page", text) == f"{base_url}/"
        assert banner_value("outbox", text) == f"{base_url}/outbox"
        yield Dev(base_url=base_url, api_key=banner_value("API key", text), process=process)
    finally:
        status = process.stop(signal.SIGINT)  # as Ctrl-C
        drop_database(server_url, name)
    assert status == 0, process.describe()


# ---------------------------------------------------------------------------------------------
# Page helpers


def _open_as(page: Page, dev: Dev, external_id: str, role: str) -> None:
    """Open the demo page as this person; return once the stream is live and the inbox loaded."""
    page.goto(f"{dev.base_url}/#{external_id}/{role}")
    _wait_ready(page)


# The inbox is Herald's <herald-inbox> element: its parts live in its (open) shadow root, which
# Playwright's CSS locators pierce; page functions reach them through this.
WIDGET = "document.querySelector('herald-inbox').shadowRoot"


def _wait_ready(page: Page) -> None:
    # Going live triggers a refetch (anything before the subscription); wait for it to finish,
    # so that from here on only the live stream can move the badge.
    page.wait_for_function(
        f"() => {{ const w = {WIDGET}; return w.getElementById('live').dataset.state === 'live'"
        " && w.getElementById('badge').dataset.loading === 'false'"
        " && w.getElementById('badge').dataset.count !== ''"
        " && w.getElementById('prefs-version').textContent !== ''; }"
    )


def _show_preferences(page: Page) -> None:
    """The element's preferences are a tab of its panel."""
    page.click("#tab-prefs")


def _badge(page: Page) -> int:
    return int(page.get_attribute("#badge", "data-count") or "-1")


def _expect_badge(page: Page, count: int) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#badge")).to_have_attribute("data-count", str(count), timeout=WAIT_MS)


def _cell(page: Page, category: str, channel: str) -> Any:
    return page.locator(f'#prefs input[data-category="{category}"][data-channel="{channel}"]')


def _save(page: Page, checkbox: Any) -> None:
    """Click a preference checkbox and wait until the page saved it (the version moved on)."""
    version = int((page.text_content("#prefs-version") or "").removeprefix("version "))
    checkbox.click()
    page.wait_for_function(
        f"() => {WIDGET}.getElementById('prefs-version').textContent === 'version {version + 1}'"
        f" && {WIDGET}.getElementById('prefs-status').dataset.kind === 'ok'"
    )


def _unique(label: str) -> str:
    return f"{label} {uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------------------------
# Without a browser: the dev-only routes


def test_dev_routes_answer_and_herald_api_does_not_serve_them(dev: Dev, api_url: str) -> None:
    """The demo page's JSON routes work under `herald dev` and do not exist under `herald api`
    (they sign tokens for anyone and show the dev key and every recorded message)."""
    people = httpx.get(f"{dev.base_url}/dev/people", timeout=10).json()
    assert (people["defaultExternalId"], people["defaultRole"]) == GUARDIAN
    ramesh = next(p for p in people["people"] if (p["externalId"], p["role"]) == GUARDIAN)
    assert set(ramesh["reachable"]) == {"email", "sms", "push", "telegram"}
    # Deepak Regmi teaches 8A and is Anisha's father: one picker entry per role.
    deepak = {p["role"] for p in people["people"] if p["externalId"] == "deepak-regmi"}
    assert deepak == {"teacher", "guardian"}

    token = dev.token(*GUARDIAN)
    inbox = httpx.get(
        f"{dev.base_url}/v1/me/notifications",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert inbox.status_code == 200, inbox.text
    refused = httpx.post(
        f"{dev.base_url}/dev/token",
        json={"externalId": "ramesh-shrestha", "role": "principal"},
        timeout=10,
    )
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "PERSON_NOT_FOUND"

    page = httpx.get(f"{dev.base_url}/", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for name, media_type in web.STATIC_FILES.items():  # every file the package must carry
        served = httpx.get(f"{dev.base_url}/dev/static/{name}", timeout=10)
        assert served.status_code == 200 and served.headers["content-type"] == media_type, name
    assert httpx.get(f"{dev.base_url}/outbox", timeout=10).status_code == 200
    assert httpx.get(f"{dev.base_url}/dev/static/dev.json", timeout=10).status_code == 404
    assert httpx.get(f"{dev.base_url}/dev/static/..%2Fweb.py", timeout=10).status_code == 404

    # Only requests addressed to this machine: no DNS-rebinding page may read the dev key.
    rebound = httpx.get(f"{dev.base_url}/dev/config", headers={"Host": "evil.example"}, timeout=10)
    assert rebound.status_code == 403
    assert "apiKey" not in rebound.text
    local = httpx.get(f"{dev.base_url}/dev/config", headers={"Host": "localhost:1"}, timeout=10)
    assert local.status_code == 200 and local.json()["apiKey"] == dev.api_key

    for path in ("/", "/outbox", "/dev/people", "/dev/config", "/dev/outbox"):
        assert httpx.get(f"{api_url}{path}", timeout=10).status_code == 404, path
    assert (
        httpx.post(
            f"{api_url}/dev/token", json={"externalId": "x", "role": "guardian"}, timeout=10
        ).status_code
        == 404
    )


# ---------------------------------------------------------------------------------------------
# In the browser


def test_the_outbox_records_a_staff_notice_on_slack_and_teams(dev: Dev) -> None:
    """Issue 46: `herald dev` mocks Slack and Teams too; a staff notice to the principal (who has
    a Slack id in the demo school) is recorded on Slack, and the Teams outbox is listed."""
    people = httpx.get(f"{dev.base_url}/dev/people", timeout=10).json()
    principal = next(p for p in people["people"] if p["externalId"] == "sunita-koirala")
    assert "slack" in principal["reachable"]
    title = _unique("Staff meeting <moved>")
    answer = httpx.post(
        f"{dev.base_url}/v1/events",
        headers={"Authorization": f"Bearer {dev.api_key}"},
        json={
            "kind": "staff.notice",
            "audience": {"kind": "users", "userIds": ["sunita-koirala"]},
            "channels": ["slack", "teams"],
            "variables": {"title": title, "message": "Now at 15:30."},
        },
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    deadline = time.monotonic() + 30  # an upper bound against hangs, never an expectation
    while True:
        outbox = httpx.get(f"{dev.base_url}/dev/outbox", timeout=10).json()
        channels = {c["channel"]: c for c in outbox["channels"]}
        found = [m for m in channels["slack"]["messages"] if m["title"] == title]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(m["to"], m["body"]) for m in found] == [("U0DEMOPRINCIPAL", "Now at 15:30.")]
    assert channels["teams"]["recording"] is True


def test_badge_follows_the_live_stream_and_mark_read(dev: Dev, tab: Tab) -> None:
    """R-REALTIME-2, R-REALTIME-7: the stream's event carries no title, so the page refetches
    the badge and the list when one arrives — the badge moves with no reload and no polling —
    and marking read (one, then all) moves it back. Titles are shown as text, never as HTML."""
    page = tab.page
    with evidence(tab, "demo-page-live"):
        _open_as(page, dev, *GUARDIAN)
        before = _badge(page)
        page.evaluate("window.__sameDocument = 'not reloaded'")

        # Sent from outside the page, as a host would: only the live stream can tell the page.
        hostile = _unique('<img src=x onerror="window.__pwned=1"> Sports & <i>day</i>')
        dev.send(hostile, group="class-7a", channels=["in_app"], message="It is now on Friday.")
        _expect_badge(page, before + 1)
        item = page.locator("#inbox li.item").filter(has_text=hostile)
        assert item.count() == 1
        assert item.locator(".item-title").text_content() == hostile
        assert page.locator("#inbox img, #inbox i").count() == 0
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("window.__sameDocument") == "not reloaded"
        assert page.locator("#live-log li").count() >= 1

        item.locator("button.mark-read").click()
        _expect_badge(page, before)
        assert item.locator(".read-at").text_content() == "read"

        # The page's own form (all channels, to 8A: the guardian's other child).
        title = _unique("Library closed on Friday")
        page.select_option("#send-audience", "guardians_of_group:class-8a")
        page.fill("#send-title", title)
        page.fill("#send-message", "Books are due back on Thursday.")
        page.click("#send-button")
        page.wait_for_selector("#send-status[data-kind='ok']")
        assert "Recorded event" in (page.text_content("#send-status") or "")
        _expect_badge(page, before + 1)
        page.locator("#inbox li.item").filter(has_text=title).wait_for()
        assert page.evaluate("window.__sameDocument") == "not reloaded"
        screenshot(page, "demo-page", whole=True)

        page.click("#mark-all")
        _expect_badge(page, 0)
        assert page.locator("#inbox li.item.unread").count() == 0


def test_preferences_persist_and_a_conflict_reloads(dev: Dev, tab: Tab) -> None:
    """R-PREFAPI-3: a switch saved from the page is there after a reload (and the person's other
    choices, like the SMS opt-in, survive the whole-set PUT); a save from a stale version is
    refused, and the page reloads the current set and says so."""
    page = tab.page
    # The browser logs the refused save's answer; that one is the point of the test. A burst of
    # saves and reloads may also meet the person's rate limit (429), which the element answers by
    # asking again after Retry-After (tests/e2e/test_inbox_widget.py proves that path).
    expected = ("status of 409 (Conflict)", "status of 429 (Too Many Requests)")
    with evidence(tab, "demo-page-preferences", expected=expected):
        _open_as(page, dev, *GUARDIAN)
        _show_preferences(page)
        cell = _cell(page, "events", "email")
        cell.wait_for()
        original = cell.is_checked()
        assert _cell(page, "announcement", "sms").is_checked()  # the demo's opt-in
        assert _cell(page, "security", "email").is_disabled()  # locked: always delivered

        _save(page, cell)
        page.reload()
        _wait_ready(page)
        _show_preferences(page)
        assert _cell(page, "events", "email").is_checked() is (not original)
        assert _cell(page, "announcement", "sms").is_checked()

        # A global mute silences the channel's cells; lifting it brings the defaults back.
        _cell(page, "announcement", "telegram").wait_for()
        _save(page, page.locator('#prefs input[data-global="telegram"]'))
        assert not _cell(page, "announcement", "telegram").is_checked()
        _save(page, page.locator('#prefs input[data-global="telegram"]'))
        assert _cell(page, "announcement", "telegram").is_checked()

        # Another device saves meanwhile (from the version the page holds).
        token = dev.token(*GUARDIAN)
        headers = {"Authorization": f"Bearer {token}"}
        version = httpx.get(f"{dev.base_url}/v1/me/preferences", headers=headers, timeout=10)
        saved = httpx.put(
            f"{dev.base_url}/v1/me/preferences",
            headers=headers,
            json={
                "version": version.json()["version"],
                "overrides": [
                    {"category": "announcement", "channel": "sms", "enabled": True},
                    {"category": "academic", "channel": "push", "enabled": False},
                ],
            },
            timeout=10,
        )
        assert saved.status_code == 200, saved.text
        _cell(page, "finance", "email").click()
        page.wait_for_selector("#prefs-status[data-kind='error']")
        assert "changed elsewhere" in (page.text_content("#prefs-status") or "")
        # What is shown now is the other device's save, not the refused change.
        assert not _cell(page, "academic", "push").is_checked()
        assert _cell(page, "finance", "email").is_checked()
        assert _cell(page, "events", "email").is_checked()  # that save left it at its default

        # Put back what the demo had.
        _save(page, _cell(page, "academic", "push"))
        after = httpx.get(f"{dev.base_url}/v1/me/preferences", headers=headers, timeout=10).json()
        cells = {c["category"]: c["channels"] for c in after["categories"]}
        assert cells["academic"]["push"] is True
        assert cells["announcement"]["sms"] is True


def test_outbox_shows_what_each_mock_recorded(dev: Dev, tab: Tab) -> None:
    """R-PROVIDER-3, R-PROVIDER-6: the outbox page reads the very mock instances the worker sent
    through (a second instance would show nothing): one announcement on every channel shows its
    email, SMS, push and Telegram renderings. SMS went only to the guardian who opted in (SMS is
    off by default); the email's HTML is shown in a sandboxed frame."""
    page = tab.page
    with evidence(tab, "demo-outbox"):
        title = _unique("Sports day moved & more")
        message = "It is now on Friday."
        dev.send(title, group="class-7a", channels=ALL_CHANNELS, message=message)
        page.goto(f"{dev.base_url}/outbox")

        def messages(channel: str) -> Any:
            return page.locator(f'section[data-channel="{channel}"] article.message').filter(
                has_text=title
            )

        # Everything the mocks recorded for this announcement shows up (the page refreshes).
        for channel in ("email", "sms", "push"):
            messages(channel).first.wait_for()
        telegram = page.locator('section[data-channel="telegram"] article.message').filter(
            has=page.locator("pre.body", has_text="Sports day moved &amp; more")
        )
        telegram.first.wait_for(state="attached")

        # SMS: only the guardian with the opt-in; push and Telegram: only where set up.
        assert messages("sms").count() == 1
        assert GUARDIAN_PHONE in (messages("sms").text_content() or "")
        assert f"{title}: {message}" in (messages("sms").locator("pre.body").text_content() or "")
        assert messages("push").count() == 1
        assert GUARDIAN_PUSH_TOKEN in (messages("push").text_content() or "")
        assert telegram.count() == 1
        assert GUARDIAN_TELEGRAM in (telegram.text_content() or "")
        # Telegram's HTML, shown as Telegram would: the title in bold, the escaped & as text.
        bold = telegram.frame_locator("iframe.preview").locator("b")
        assert bold.text_content() == title

        email = messages("email").filter(has_text=GUARDIAN_EMAIL)
        assert email.count() == 1
        frame = email.locator("iframe.preview")
        assert frame.get_attribute("sandbox") == ""
        assert "Sports day moved &amp; more" in (frame.get_attribute("srcdoc") or "")
        heading = email.frame_locator("iframe.preview").locator("h1")
        assert heading.text_content() == title
        assert messages("email").count() > 1  # the other 7A guardians got email too

        screenshot(page, "demo-outbox", whole=True)


def test_ctrl_c_stops_herald_dev_while_the_page_is_live(dev: Dev, tab: Tab) -> None:
    """Ctrl-C stops `herald dev` (exit 0) while a demo page holds its live stream open: the
    streams are ended on stop, where uvicorn would otherwise wait on them for ever. Runs last in
    this module: it stops the module's `herald dev`."""
    page = tab.page
    # The page notices the stream's end and its reconnects failing; that is expected here.
    with evidence(tab, "demo-page-stop", expected=("net::ERR_CONNECTION_REFUSED",)):
        _open_as(page, dev, *GUARDIAN)
        status = dev.process.stop(signal.SIGINT)
        assert status == 0, dev.process.describe()
        assert "herald dev stopped" in dev.process.output()
        page.wait_for_selector("#live[data-state='reconnecting']")
