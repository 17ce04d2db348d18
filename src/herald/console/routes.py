"""The console's routes: sign-in, sign-out, and the screens (herald api serves them under /console).

One router for the app, assembled from one router a screen. The order is the screens' own and
decides nothing: no screen serves a path another serves (tests/unit/test_route_order.py holds the
same rule between the app's routers); within a screen, a fixed path such as /templates/new is
declared before the /templates/{template_id} it would otherwise be read as.
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter

from herald.console.screens import (
    assets,
    broadcasts,
    dead_letters,
    feed,
    history,
    outcomes,
    people,
    providers,
    reminders,
    session,
    templates,
    trace,
)

SCREENS: Final = (
    assets,
    session,
    history,
    trace,
    people,
    dead_letters,
    templates,
    feed,
    outcomes,
    broadcasts,
    reminders,
    providers,
)

# The screens' routes themselves rather than include_router: the app sees the console as one
# router of plain routes, as before the split, so a console request is matched without a second
# level of included routers and tests/unit/test_route_order.py reads every path of it.
router = APIRouter(routes=[route for screen in SCREENS for route in screen.router.routes])
