"""Provider callbacks: delivery receipts from Resend and Twilio. No Herald credential: the
provider's own signature is the authentication (401 without a valid one)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from herald.auth.deps import all_tenants_transaction, state
from herald.receipts import service
from herald.receipts.schemas import ReceiptResult

router = APIRouter(prefix="/v1/providers", tags=["provider callbacks"])


@router.post("/resend/events", response_model=ReceiptResult)
async def resend_events(request: Request) -> ReceiptResult:
    receipt = service.verify_resend(
        state(request).settings, await request.body(), service.headers_of(request.headers)
    )
    async with all_tenants_transaction(request) as conn:
        return ReceiptResult(result=(await service.apply(conn, receipt)).result)


@router.post("/twilio/status", response_model=ReceiptResult)
async def twilio_status(request: Request) -> ReceiptResult:
    receipt = service.verify_twilio(
        state(request).settings,
        str(request.url),
        service.form_params(await request.body()),
        request.headers.get("x-twilio-signature"),
    )
    async with all_tenants_transaction(request) as conn:
        return ReceiptResult(result=(await service.apply(conn, receipt)).result)
