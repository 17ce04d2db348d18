"""The admin operations feed (fan-out on read): `herald.feed.publish(tx, …)` records one row per
operational event, carrying the permission code a viewer's active role must hold."""

from __future__ import annotations

from herald.feed.service import publish, publish_sync

__all__ = ["publish", "publish_sync"]
