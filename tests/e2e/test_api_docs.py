"""/docs works with the network closed: every file they need comes from Herald.

The browser's context answers only requests to the API's own origin; anything else is refused
and recorded, so a page that reaches for a CDN both fails to draw and fails the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.harness import WAIT_MS, Tab, evidence


@pytest.fixture
def offline_tab(tab: Tab, api_url: str) -> Iterator[tuple[Tab, list[str]]]:
    own = urlsplit(api_url).netloc
    refused: list[str] = []

    def only_herald(route, request) -> None:  # type: ignore[no-untyped-def]
        if urlsplit(request.url).netloc == own or request.url.startswith(("blob:", "data:")):
            route.continue_()
        else:
            refused.append(request.url)
            route.abort("internetdisconnected")

    tab.page.context.route("**/*", only_herald)
    yield tab, refused


def test_swagger_ui_lists_the_operations_offline(
    offline_tab: tuple[Tab, list[str]], api_url: str
) -> None:
    tab, refused = offline_tab
    with evidence(tab, "api-docs-swagger"):
        tab.page.goto(f"{api_url}/docs")
        tab.page.locator(".opblock").first.wait_for(timeout=WAIT_MS)
        paths = tab.page.locator(".opblock-summary-path").all_inner_texts()
        assert any(p.replace("\u200b", "") == "/v1/events" for p in paths), paths[:10]
        assert tab.page.locator(".opblock").count() > 20
    assert refused == []


def test_the_docs_pages_name_no_other_origin(api_url: str) -> None:
    """No script, style or image of the page comes from elsewhere, and the page says so in its
    Content-Security-Policy; the assets are served from a fixed list."""
    with httpx.Client(base_url=api_url, timeout=10) as http:
        response = http.get("/docs")
        assert response.status_code == 200
        assert "http://" not in response.text and "https://" not in response.text
        policy = response.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "unsafe-inline" not in policy
        # Redoc is not served (its page draws a logo from a CDN), and no CDN page is left.
        assert http.get("/redoc").status_code == 404
        script = http.get("/docs/assets/swagger-ui-bundle.js")
        assert script.status_code == 200 and script.headers["content-type"].startswith(
            "text/javascript"
        )
        assert http.get("/docs/assets/../config.py").status_code == 404
        missing = http.get("/docs/assets/nothing.js")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "NOT_FOUND"
        assert "/docs" not in http.get("/openapi.json").json()["paths"]
