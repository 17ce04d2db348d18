"""HTTP models of the provider callbacks."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ReceiptResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # What the receipt did: moved the delivery, or nothing (unknown id, duplicate, out of order,
    # or a status Herald does not act on). The provider needs only the 200.
    result: Literal["delivered", "bounced", "ignored"]
