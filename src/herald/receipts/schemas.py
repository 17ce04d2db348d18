"""HTTP models of the provider callbacks."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ReceiptResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # What the receipt did: moved the delivery; kept it (`pending`, answered 202) because its send
    # is still being recorded, to be applied when it is; or nothing (unknown id, duplicate, out of
    # order, or a status Herald does not act on). The provider needs only the 2xx.
    result: Literal["delivered", "bounced", "pending", "ignored"]


class ReceiptResults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # One result per status in the callback, in its order (Meta batches statuses in one POST).
    results: list[Literal["delivered", "bounced", "pending", "ignored"]]
