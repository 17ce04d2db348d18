"""Provider callbacks: delivery receipts from Resend and Twilio. No Herald credential: the
provider's own signature is the authentication (401 without a valid one). A Twilio receipt that
comes before its send is recorded is kept and answered 202."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

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


@router.post(
    "/twilio/status",
    response_model=ReceiptResult,
    responses={
        202: {
            "model": ReceiptResult,
            "description": "Kept: the send it names is still being recorded; applied when it is.",
        }
    },
)
async def twilio_status(request: Request, response: Response) -> ReceiptResult:
    receipt = service.verify_twilio(
        state(request).settings,
        str(request.url),
        service.form_params(await request.body()),
        request.headers.get("x-twilio-signature"),
    )
    async with all_tenants_transaction(request) as conn:
        applied = await service.apply(conn, receipt)
    if applied.result == "pending":
        response.status_code = 202
    return ReceiptResult(result=applied.result)
