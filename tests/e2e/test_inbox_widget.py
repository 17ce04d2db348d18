"""<herald-inbox> on a host page of another origin, in headless Chromium, against real processes.

A static host page (served by a second local HTTP server, so another origin) embeds the element
with one script tag and a token provider; `herald api` runs with that origin, and only that one,
in HERALD_CORS_ORIGINS, beside a `herald worker`. The browser is Debian's chromium under
Playwright, through tests/e2e/conftest.py's `browser` and `tab` fixtures.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from herald.auth import service as auth
from herald.config import Settings
from herald.db.engine import libpq_url
from tests.e2e.harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT_MS,
    HeraldProcess,
    Tab,
    evidence,
    free_port,
    last_line,
    run_cli,
)

PERSON = "widget-guardian"
WIDGET = "document.querySelector('herald-inbox').shadowRoot"

PAGE = """<!doctype html>
<html lang="{lang}">
<head>
  <meta charset="utf-8">
  <title>A host application</title>
  <link rel="icon" href="data:,">
  <script>
    // The host's token provider: the first answer is a stale token, so the element's first
    // call is refused (401) and it asks again.
    window.tokenCalls = 0;
    window.getHeraldToken = async () => (window.tokenCalls++ === 0 ? "stale.token.x" : {token});
  </script>
  <script src="{api}/v1/widget/herald-inbox.js" defer></script>
</head>
<body>
  <h1>School portal</h1>
  <herald-inbox api="{api}" token-provider="getHeraldToken" {extra}></herald-inbox>
</body>
</html>
"""


@dataclass
class Stack:
    api_url: str
    api_port: int
    env: dict[str, str]
    folder: Path
    tenant: str
    key: str
    token: str
    database_url: str
    api: HeraldProcess
    processes: list[HeraldProcess] = field(default_factory=list)

    def send(self, title: str, *, action_url: str | None = None) -> str:
        body: dict[str, Any] = {
            "kind": "announcement.posted",
            "audience": {"kind": "users", "userIds": [PERSON]},
            "channels": ["in_app"],
            "variables": {"title": title, "message": "From the host's server."},
        }
        if action_url:
            body["actionUrl"] = action_url
        answer = httpx.post(
            f"{self.api_url}/v1/events",
            headers={"Authorization": f"Bearer {self.key}"},
            json=body,
            timeout=10,
        )
        assert answer.status_code == 201, answer.text
        event_id: str = answer.json()["id"]
        return event_id

    def start_api(self) -> None:
        log = self.folder / f"api-{len(self.processes)}.log"
        self.api = HeraldProcess(["api", "--port", str(self.api_port)], self.env, log)
        self.processes.append(self.api)
        self.api.wait_until_healthy(self.api_url)

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(libpq_url(self.database_url), autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A static host page server on a free port: http://127.0.0.1:<port> is its origin."""
    folder = tmp_path_factory.mktemp("host-page")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def stack(
    e2e_env: dict[str, str],
    database_url: str,
    settings: Settings,
    host: tuple[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    origin, folder = host
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    env = {
        **e2e_env,
        "HERALD_CORS_ORIGINS": origin,
        "HERALD_WEBPUSH_VAPID_SUBJECT": "mailto:ops@school.example",
    }
    created = run_cli(["keys", "create", "--tenant", tenant, "--scopes", "*"], env)
    assert created.returncode == 0, created.stderr
    key = last_line(created.stdout)
    port = free_port()
    logs = tmp_path_factory.mktemp("widget")
    worker = HeraldProcess(["worker"], env, logs / "worker.log")
    stack = Stack(
        api_url=f"http://127.0.0.1:{port}",
        api_port=port,
        env=env,
        folder=logs,
        tenant=tenant,
        key=key,
        token=auth.sign_token(settings, tenant_id=tenant, subject=PERSON, ttl=timedelta(hours=1)),
        database_url=database_url,
        api=worker,  # replaced by start_api
        processes=[worker],
    )
    try:
        stack.start_api()
        put = httpx.put(
            f"{stack.api_url}/v1/people/{PERSON}",
            headers={"Authorization": f"Bearer {key}"},
            json={"fullName": "Sita Sharma"},
            timeout=10,
        )
        assert put.status_code in (200, 201), put.text
        # The host's service worker: the one line a host adds to load Herald's push handler.
        (folder / "herald-sw.js").write_text(
            f"importScripts({json.dumps(stack.api_url + '/v1/widget/herald-push-sw.js')});\n",
            "utf-8",
        )
        for lang, name, extra in (
            ("en", "index.html", ""),
            ("ne", "ne.html", 'page-size="2"'),
            ("en", "push.html", 'inline push-worker="/herald-sw.js"'),
        ):
            page = PAGE.format(
                api=stack.api_url, token=json.dumps(stack.token), lang=lang, extra=extra
            )
            (folder / name).write_text(page, "utf-8")
        yield stack
    finally:
        for process in stack.processes:
            process.stop()


# ---------------------------------------------------------------------------------------------
# Helpers


def _wait_live(page: Any) -> None:
    page.wait_for_function(
        f"() => {{ const w = {WIDGET}; return w && w.getElementById('live').dataset.state === 'live'"
        " && w.getElementById('badge').dataset.loading === 'false'"
        " && w.getElementById('badge').dataset.count !== ''"
        " && w.getElementById('prefs-version').textContent !== ''; }"
    )


def _badge(page: Any) -> int:
    return int(page.get_attribute("#badge", "data-count") or "-1")


def _expect_badge(page: Any, count: int) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#badge")).to_have_attribute("data-count", str(count), timeout=WAIT_MS)


def _active(page: Any) -> dict[str, Any]:
    """What has the keyboard focus inside the element (null when nothing there has it)."""
    answer: dict[str, Any] = page.evaluate(
        f"""() => {{
            const a = {WIDGET}.activeElement;
            if (!a) return {{}};
            const li = a.closest('li');
            return {{ id: a.id, cls: a.className, title: li ? li.querySelector('.item-title').textContent : null,
                     category: a.dataset.category || null, channel: a.dataset.channel || null,
                     inPanel: {WIDGET}.getElementById('panel').contains(a) }};
        }}"""
    )
    return answer


def _tab_to(page: Any, wanted: Any, limit: int = 150) -> None:
    """Press Tab until the focused element is the wanted one (keyboard only, bounded)."""
    for _ in range(limit):
        if wanted(_active(page)):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached it; focus is on {_active(page)}")


def _wait_fanned_out(stack: Stack, count: int) -> None:
    """The worker has written `count` in-app recipients for the person (the API may be down)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        [(done,)] = stack.sql(
            "SELECT count(*) FROM notification_recipient WHERE tenant_id = %s", stack.tenant
        )
        if done >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"the worker never fanned out {count} recipient(s)")


# ---------------------------------------------------------------------------------------------
# Tests


def test_script_urls_and_cache_headers(stack: Stack, host: tuple[str, Path]) -> None:
    stable = httpx.get(f"{stack.api_url}/v1/widget/herald-inbox.js", timeout=10)
    assert stable.status_code == 302
    assert stable.headers["cache-control"] == "public, max-age=300"
    hashed = stable.headers["location"]
    assert hashed.startswith("/v1/widget/herald-inbox.") and hashed.endswith(".js")
    script = httpx.get(f"{stack.api_url}{hashed}", timeout=10)
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert "customElements.define('herald-inbox'" in script.text
    stale = httpx.get(f"{stack.api_url}/v1/widget/herald-inbox.0000000000000000.js", timeout=10)
    assert stale.status_code == 404
    assert stale.json()["error"]["code"] == "NOT_FOUND"


def test_live_badge_reconnect_keyboard_and_safe_links(
    stack: Stack, host: tuple[str, Path], tab: Tab
) -> None:
    origin, _ = host
    page = tab.page
    popups: list[str] = []
    page.context.on("page", lambda other: popups.append(other.url))
    expected = (
        "status of 401",
        "status of 409",
        "ERR_CONNECTION_REFUSED",
        "ERR_EMPTY_RESPONSE",
        "ERR_INCOMPLETE_CHUNKED_ENCODING",
    )
    with evidence(tab, "widget-live", expected=expected):
        page.goto(f"{origin}/index.html")
        _wait_live(page)
        # The stale token was refused and the host's provider was asked again.
        assert page.evaluate("window.tokenCalls") >= 2
        before = _badge(page)
        page.evaluate("window.__sameDocument = 'not reloaded'")

        # An event sent over the API, as the host's server would: the badge lights up.
        first = f"Sports day moved {uuid.uuid4().hex[:6]}"
        stack.send(first, action_url="https://school.example.com/notices/1")
        _expect_badge(page, before + 1)
        assert page.get_attribute("#bell", "aria-label").endswith("1 unread notification")
        assert page.text_content("#announce") == "1 unread notification"

        # The stream is cut (the API process stops); an event arrives meanwhile; the API
        # comes back: after the reconnect the badge is right without another event.
        stack.api.stop()
        page.wait_for_selector("#live[data-state='reconnecting']", state="attached")
        sent = run_cli(
            [
                "send",
                "announcement.posted",
                "--tenant",
                stack.tenant,
                "--audience",
                json.dumps({"kind": "users", "userIds": [PERSON]}),
                "--channel",
                "in_app",
                "--var",
                "title=While you were away",
                "--var",
                "message=The stream was down.",
            ],
            stack.env,
        )
        assert sent.returncode == 0, sent.stderr
        _wait_fanned_out(stack, 2)
        stack.start_api()
        page.wait_for_selector("#live[data-state='live']", state="attached")
        _expect_badge(page, before + 2)
        assert page.evaluate("window.__sameDocument") == "not reloaded"

        # A javascript: action URL (written straight into the database: the API refuses one)
        # is shown as text, never as a link, and never runs.
        hostile = f"Hostile link {uuid.uuid4().hex[:6]}"
        event_id = stack.send(hostile, action_url="https://school.example.com/notices/2")
        _expect_badge(page, before + 3)
        stack.sql(
            "UPDATE notification_event SET action_url = %s WHERE public_id = %s",
            "javascript:window.__pwned=1",
            event_id,
        )
        stack.send(f"Nudge {uuid.uuid4().hex[:6]}")  # the refetch it causes reads the new URL
        _expect_badge(page, before + 4)
        item = page.locator("#inbox li.item").filter(has_text=hostile)
        item.wait_for(state="attached")
        assert item.locator("a").count() == 0
        safe = page.locator("#inbox li.item").filter(has_text=first).locator("a.action")
        assert safe.get_attribute("href") == "https://school.example.com/notices/1"
        checks = page.evaluate(
            """() => { const f = customElements.get('herald-inbox').safeHref;
               return ['javascript:alert(1)', 'JaVaScRiPt:alert(1)', ' javascript:alert(1)',
                       'java\\tscript:alert(1)', 'data:text/html,x', 'vbscript:x', '//evil.example',
                       'https://ok.example/a', '/notices/3'].map((u) => f(u)); }"""
        )
        assert checks[:7] == [None] * 7
        assert checks[7] == "https://ok.example/a"
        assert checks[8] == f"{origin}/notices/3"

        # Keyboard only: Tab to the bell, Enter opens the panel (focus on its first tab).
        page.locator("body").focus()
        _tab_to(page, lambda a: a.get("id") == "bell")
        page.keyboard.press("Enter")
        assert _active(page)["id"] == "tab-inbox"
        assert page.get_attribute("#bell", "aria-expanded") == "true"
        # The focus trap: however far one tabs, the focus stays in the panel.
        for _ in range(25):
            page.keyboard.press("Tab")
            assert _active(page).get("inPanel"), _active(page)
        # The hostile item's link is not there to reach; activating its title does nothing.
        assert page.evaluate("window.__pwned") is None

        # Mark one read (Tab to its button, Enter).
        _tab_to(page, lambda a: a.get("title") == first and "mark-read" in (a.get("cls") or ""))
        page.keyboard.press("Enter")
        _expect_badge(page, before + 3)
        # Mark all read.
        _tab_to(page, lambda a: a.get("id") == "mark-all")
        page.keyboard.press("Enter")
        _expect_badge(page, 0)
        assert page.locator("#inbox li.item.unread").count() == 0
        page.wait_for_selector("#inbox-status[data-kind='ok']", state="attached")

        # Preferences: arrow to the tab, Tab to a cell, Space saves it.
        _tab_to(page, lambda a: a.get("id") == "tab-inbox")
        page.keyboard.press("ArrowRight")
        assert _active(page)["id"] == "tab-prefs"
        version = int((page.text_content("#prefs-version") or "").removeprefix("version "))
        cell = page.locator('#prefs input[data-category="events"][data-channel="email"]')
        was = cell.is_checked()
        _tab_to(page, lambda a: (a.get("category"), a.get("channel")) == ("events", "email"))
        page.keyboard.press("Space")
        page.wait_for_function(
            f"() => {WIDGET}.getElementById('prefs-version').textContent === 'version {version + 1}'"
            f" && {WIDGET}.getElementById('prefs-status').dataset.kind === 'ok'"
        )
        assert cell.is_checked() is (not was)
        assert (_active(page)["category"], _active(page)["channel"]) == ("events", "email")

        # Another device saves meanwhile; the next change here is refused (409): the element
        # reloads the current set and says so.
        headers = {"Authorization": f"Bearer {stack.token}"}
        current = httpx.get(f"{stack.api_url}/v1/me/preferences", headers=headers, timeout=10)
        other = httpx.put(
            f"{stack.api_url}/v1/me/preferences",
            headers=headers,
            json={
                "version": current.json()["version"],
                "overrides": [{"category": "academic", "channel": "push", "enabled": False}],
            },
            timeout=10,
        )
        assert other.status_code == 200, other.text
        _tab_to(page, lambda a: (a.get("category"), a.get("channel")) == ("finance", "email"))
        page.keyboard.press("Space")
        page.wait_for_selector("#prefs-status[data-kind='error']", state="attached")
        assert "changed elsewhere" in (page.text_content("#prefs-status") or "")
        assert page.text_content("#prefs-version") == f"version {other.json()['version']}"
        assert not page.locator(
            '#prefs input[data-category="academic"][data-channel="push"]'
        ).is_checked()

        # Escape closes the panel and gives the focus back to the bell.
        page.keyboard.press("Escape")
        assert page.get_attribute("#bell", "aria-expanded") == "false"
        assert _active(page)["id"] == "bell"
        assert popups == []
        assert page.evaluate("window.__pwned") is None


def test_nepali_paging_and_the_capped_badge(stack: Stack, host: tuple[str, Path], tab: Tab) -> None:
    """Texts follow the page's lang (and its changes); pages of `page-size` with Load more; the
    badge shows 99+ from 99 or when the server flags the count capped, reading it defensively.
    Runs after the live test: the person has four notifications by now."""
    origin, _ = host
    page = tab.page
    with evidence(tab, "widget-nepali", expected=("status of 401",)):
        page.goto(f"{origin}/ne.html")
        _wait_live(page)
        assert page.text_content("#tab-inbox") == "इनबक्स"
        assert page.text_content("#mark-all") == "सबै पढियो"

        page.click("#bell")
        assert page.locator("#inbox li.item").count() == 2
        _tab_to(page, lambda a: a.get("id") == "more")
        page.keyboard.press("Enter")
        page.wait_for_function(f"() => {WIDGET}.querySelectorAll('#inbox li.item').length === 4")
        page.wait_for_selector("#more", state="hidden")

        page.evaluate("document.documentElement.lang = 'en'")
        page.wait_for_function(
            f"() => {WIDGET}.getElementById('tab-inbox').textContent === 'Inbox'"
        )

        counts = page.evaluate(
            """() => { const read = customElements.get('herald-inbox').readCount;
               return [{count: 5}, {count: '7'}, {}, null, {count: -3}, {count: 98},
                       {count: 99}, {count: 12, capped: true}].map(read); }"""
        )
        assert counts == [
            {"count": 5, "capped": False},
            {"count": 7, "capped": False},
            {"count": 0, "capped": False},
            {"count": 0, "capped": False},
            {"count": 0, "capped": False},
            {"count": 98, "capped": False},
            {"count": 99, "capped": True},
            {"count": 12, "capped": True},
        ]
        shown = page.evaluate(
            """() => { const w = document.querySelector('herald-inbox');
               const read = customElements.get('herald-inbox').readCount;
               return [{count: 98}, {count: 250}, {count: 40, capped: true}].map((c) => {
                 w._renderCount(read(c)); return w.shadowRoot.getElementById('badge').textContent;
               }); }"""
        )
        assert shown == ["98", "99+", "99+"]


def test_an_origin_not_listed_is_refused(stack: Stack, host: tuple[str, Path], tab: Tab) -> None:
    """The same page from http://localhost:<port>, an origin not in HERALD_CORS_ORIGINS: the
    browser refuses the element's calls (no CORS headers), while the listed origin is answered."""
    origin, _ = host
    unlisted = origin.replace("127.0.0.1", "localhost")
    page = tab.page
    probe = (
        "(api) => fetch(api + '/v1/me/notifications/unread-count',"
        " {headers: {Authorization: 'Bearer ' + 'x'}}).then((r) => 'answered ' + r.status,"
        " () => 'refused')"
    )
    expected = ("CORS", "Failed to fetch", "ERR_FAILED", "status of 401")
    with evidence(tab, "widget-cors", expected=expected):
        page.goto(f"{unlisted}/index.html")
        page.wait_for_selector("#inbox-status[data-kind='error']", state="attached")
        assert page.get_attribute("#badge", "data-count") == ""
        assert page.evaluate(probe, stack.api_url) == "refused"
        page.goto(f"{origin}/index.html")
        _wait_live(page)
        assert page.evaluate(probe, stack.api_url) == "answered 401"


def test_a_busy_answer_is_retried_after_its_retry_after(
    stack: Stack, host: tuple[str, Path], tab: Tab
) -> None:
    """A call refused with 429 (the person's rate limit) changed nothing on the server, so the
    element makes it again after the answer's Retry-After instead of failing its screen (CI once
    saw a burst of preference saves refused this way)."""
    origin, _ = host
    page = tab.page
    calls: list[str] = []

    def busy_once(route: Any) -> None:
        if route.request.method == "OPTIONS":
            route.continue_()
            return
        calls.append(route.request.url)
        if len(calls) > 1:
            route.continue_()
            return
        route.fulfill(
            status=429,
            headers={
                "Retry-After": "1",
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Expose-Headers": "Retry-After",
                "Content-Type": "application/json",
            },
            body='{"error":{"code":"RATE_LIMITED","message":"Too many requests."}}',
        )

    # (The host page hands out a stale first token on purpose: its 401s are expected too.)
    with evidence(tab, "widget-busy", expected=("status of 429", "status of 401")):
        # The preferences are read once when the element starts (nothing refetches them by
        # itself): refused once, they appear only if the element asks again.
        page.route("**/v1/me/preferences", busy_once)
        page.goto(f"{origin}/index.html")
        _wait_live(page)  # includes the preferences' version being shown
        assert len(calls) == 2, calls
        assert page.get_attribute("#prefs-status", "data-kind") != "error"


def test_the_inbox_is_shown_after_a_429_and_a_503(
    stack: Stack, host: tuple[str, Path], tab: Tab
) -> None:
    """The first call to the count and the first to the list are refused with 429 (Retry-After:
    2), the second with 503 (Retry-After: 1), then let through: the element waits each answer's
    Retry-After (2 s, not its 1 s default) and makes the call again, three times in all, and ends
    up showing the items and the badge instead of "Could not load the notifications"."""
    origin, _ = host
    page = tab.page
    before = _wait_recipients(stack)
    title = f"Busy but shown {uuid.uuid4().hex[:6]}"
    stack.send(title)
    _wait_fanned_out(stack, before + 1)
    unread = httpx.get(
        f"{stack.api_url}/v1/me/notifications/unread-count",
        headers={"Authorization": f"Bearer {stack.token}"},
        timeout=10,
    ).json()["count"]
    refusals = [(429, "2", "RATE_LIMITED"), (503, "1", "SERVICE_UNAVAILABLE")]
    asked: dict[str, list[float]] = {"count": [], "list": []}
    answered: dict[str, list[int]] = {"count": [], "list": []}

    def which(url: str) -> str | None:
        path = url.split("?", 1)[0]
        if path.endswith("/v1/me/notifications/unread-count"):
            return "count"
        return "list" if path.endswith("/v1/me/notifications") else None

    def busy_twice(route: Any) -> None:
        name = which(route.request.url)
        if route.request.method == "OPTIONS" or name is None:
            route.continue_()
            return
        asked[name].append(time.monotonic())
        if len(asked[name]) > len(refusals):
            route.continue_()
            return
        status, wait, code = refusals[len(asked[name]) - 1]
        route.fulfill(
            status=status,
            headers={
                "Retry-After": wait,
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Expose-Headers": "Retry-After",
                "Content-Type": "application/json",
            },
            body=json.dumps({"error": {"code": code, "message": "Try again later."}}),
        )

    def record(response: Any) -> None:
        name = which(response.url)
        if name is not None and response.request.method == "GET":
            answered[name].append(response.status)

    page.on("response", record)
    page.route(lambda url: which(url) is not None, busy_twice)  # not the stream
    expected = ("status of 429", "status of 503", "status of 401")
    with evidence(tab, "widget-busy-inbox", expected=expected):
        page.goto(f"{origin}/index.html")
        _wait_live(page)
        _expect_badge(page, unread)
        page.locator("#inbox li.item").filter(has_text=title).wait_for(state="attached")
        assert page.get_attribute("#inbox-status", "data-kind") != "error"
    for name in ("count", "list"):
        # (The host page's stale first token may add a 401, asked again at once, in between.)
        shown = [status for status in answered[name] if status != 401]
        assert shown[:3] == [429, 503, 200], (name, answered[name])
        first, second, third = asked[name][:3]
        # Lower bounds only: a timer never fires early, however slow the machine.
        assert second - first >= 1.5, (name, second - first)
        assert third - second >= 0.8, (name, third - second)


def _wait_recipients(stack: Stack) -> int:
    [(done,)] = stack.sql(
        "SELECT count(*) FROM notification_recipient WHERE tenant_id = %s", stack.tenant
    )
    return int(done)


def test_browser_notifications_subscribe_through_the_hosts_service_worker(
    stack: Stack, host: tuple[str, Path], browser: Any, tmp_path: Path
) -> None:
    """The preferences tab's switch asks permission, registers the host's service worker (which
    imports Herald's handler), fetches the VAPID key and calls PushManager.subscribe with it. Where
    Chromium reaches its push service, the subscription becomes a webpush device and the switch
    off removes it; where it cannot (no internet here), the browser refuses the subscribe call
    itself and the test stops there, saying so. A persistent profile: Chromium has no Push API
    in an incognito context, which is what a fresh Playwright context is."""
    origin, _ = host
    worker = httpx.get(f"{stack.api_url}/v1/widget/herald-push-sw.js", timeout=10)
    assert worker.status_code == 200
    assert worker.headers["content-type"] == "text/javascript; charset=utf-8"
    assert "showNotification" in worker.text
    context = browser.browser_type.launch_persistent_context(
        str(tmp_path / "profile"),
        executable_path=str(CHROMIUM),
        headless=True,
        args=[a for a in CHROMIUM_ARGS if a != "--disable-background-networking"],
        viewport={"width": 1280, "height": 900},
    )
    try:
        context.grant_permissions(["notifications"], origin=origin)
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(WAIT_MS)
        problems: list[str] = []
        page.on(
            "console",
            lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        # Record the subscribe call and its key before the browser answers it.
        page.add_init_script(
            """(() => {
                const original = PushManager.prototype.subscribe;
                window.subscribeCalls = [];
                PushManager.prototype.subscribe = function (options) {
                    const key = options && options.applicationServerKey;
                    window.subscribeCalls.push({ userVisibleOnly: options.userVisibleOnly,
                                                 keyLength: key ? key.byteLength : 0 });
                    return original.call(this, options);
                };
                window.pushErrors = [];
                document.addEventListener('herald-push-error',
                                          (e) => window.pushErrors.push(e.detail), true);
            })();"""
        )
        refused = _switch_browser_notifications(stack, origin, Tab(page, problems))
    finally:
        context.close()
    if refused is not None:
        pytest.skip(
            "Chromium's push service cannot be reached from here, so it refused the subscribe "
            f"call Herald's widget made ({refused}); the service worker, the VAPID key and the "
            "call itself were exercised"
        )


def _switch_browser_notifications(stack: Stack, origin: str, tab: Tab) -> str | None:
    """Turn the switch on (and, if that worked, off again); the browser's refusal, if any."""
    page = tab.page
    expected = ("status of 401", "push service", "Registration failed", "AbortError")
    with evidence(tab, "widget-webpush", expected=expected):
        page.goto(f"{origin}/push.html")
        _wait_live(page)
        page.click("#tab-prefs")
        toggle = page.locator("#webpush-toggle")
        assert page.locator("#webpush-label").text_content() == "Browser notifications"
        assert not toggle.is_checked() and toggle.is_enabled()
        toggle.click()
        page.wait_for_function(
            f"() => {{ const s = {WIDGET}.getElementById('webpush-status');"
            " return s.dataset.kind === 'ok' || s.dataset.kind === 'error'; }",
            timeout=WAIT_MS + 20_000,  # the widget gives the browser 20 s to answer
        )
        registered = page.evaluate(
            "() => navigator.serviceWorker.getRegistration('/herald-sw.js')"
            ".then((r) => Boolean(r && (r.active || r.waiting || r.installing)))"
        )
        assert registered, "the host's service worker was not registered"
        calls = page.evaluate("() => window.subscribeCalls")
        assert calls == [{"userVisibleOnly": True, "keyLength": 65}], calls
        status = page.locator("#webpush-status")
        devices = stack.sql(
            "SELECT platform, token FROM notification_push_token "
            "WHERE tenant_id = %s AND is_active",
            stack.tenant,
        )
        if status.get_attribute("data-kind") == "error":
            errors = page.evaluate("() => window.pushErrors")
            assert devices == [] and not toggle.is_checked()
            # Offline, Chromium either refuses at once (AbortError) or never answers, and the
            # widget gives up after 20 s (TimeoutError).
            [error] = errors
            assert error["name"] in ("AbortError", "TimeoutError"), errors
            assert (
                status.text_content() == f"Could not change browser notifications. {error['name']}"
            )
            return f"{error['name']}: {error['message']}"
        assert status.text_content() == "This browser shows your notifications."
        [(platform, endpoint)] = devices
        assert platform == "webpush" and endpoint.startswith("https://")
        toggle.click()
        page.wait_for_function(
            f"() => {WIDGET}.getElementById('webpush-status').textContent"
            " === 'This browser does not show your notifications.'"
        )
        assert stack.sql(
            "SELECT count(*) FROM notification_push_token WHERE tenant_id = %s AND is_active",
            stack.tenant,
        ) == [(0,)]
    return None


def test_quiet_hours_in_the_preferences_tab(stack: Stack, host: tuple[str, Path], tab: Tab) -> None:
    """The preferences tab's Quiet hours switch saves 21:00-07:00 (the whole set, at the version
    read); changing the end saves again; a start equal to its end is refused (422
    NOTIFICATION_QUIET_HOURS_INVALID) and the stored hours are shown again; off clears them.
    Nepali texts follow the page's lang."""
    origin, _ = host
    page = tab.page
    headers = {"Authorization": f"Bearer {stack.token}"}

    def stored() -> Any:
        answer = httpx.get(f"{stack.api_url}/v1/me/preferences", headers=headers, timeout=10)
        return answer.json()["quietHours"]

    def act(element: str, value: str | None = None) -> None:
        """Click the switch, or set a time as the picker does (its change event)."""
        if value is None:
            page.evaluate(f"() => {WIDGET}.getElementById('{element}').click()")
        else:
            page.evaluate(
                f"() => {{ const i = {WIDGET}.getElementById('{element}'); i.value = '{value}';"
                " i.dispatchEvent(new Event('change')); }"
            )

    def saved_ok(version: int) -> None:
        page.wait_for_function(
            f"() => {WIDGET}.getElementById('prefs-version').textContent === 'version {version}'"
            f" && {WIDGET}.getElementById('prefs-status').dataset.kind === 'ok'"
        )

    with evidence(tab, "widget-quiet-hours", expected=("status of 401", "status of 422")):
        page.goto(f"{origin}/index.html")
        _wait_live(page)
        page.click("#bell")
        _tab_to(page, lambda a: a.get("id") == "tab-inbox")
        page.keyboard.press("ArrowRight")
        assert _active(page)["id"] == "tab-prefs"
        version = int((page.text_content("#prefs-version") or "").removeprefix("version "))
        assert "Quiet hours" in (page.text_content(".quiet") or "")
        assert page.locator("#quiet-start").is_disabled()
        act("quiet-on")
        saved_ok(version + 1)
        assert stored() == {"start": "21:00", "end": "07:00", "timezone": None}
        act("quiet-end", "06:30")
        saved_ok(version + 2)
        assert stored() == {"start": "21:00", "end": "06:30", "timezone": None}
        act("quiet-end", "21:00")
        page.wait_for_selector("#prefs-status[data-kind='error']", state="attached")
        assert "NOTIFICATION_QUIET_HOURS_INVALID" in (page.text_content("#prefs-status") or "")
        assert page.evaluate(f"() => {WIDGET}.getElementById('quiet-end').value") == "06:30"
        act("quiet-on")
        saved_ok(version + 3)
        assert stored() is None
        page.evaluate("document.documentElement.lang = 'ne'")
        page.wait_for_function(
            f"() => {WIDGET}.querySelector('.quiet').textContent.includes('शान्त समय')"
        )
