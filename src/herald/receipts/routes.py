"""Provider callbacks: delivery receipts from Resend, Twilio and WhatsApp. No Herald credential: the
provider's own signature is the authentication (401 without a valid one). A Twilio receipt that
comes before its send is recorded is kept and answered 202."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import PlainTextResponse

from herald.auth.deps import all_tenants_transaction, state
from herald.receipts import service
from herald.receipts.schemas import ReceiptResult, ReceiptResults

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


@router.post("/whatsapp/webhook", response_model=ReceiptResults)
async def whatsapp_webhook(request: Request) -> ReceiptResults:
    """Meta's WhatsApp webhook: message statuses (sent, delivered, read, failed), verified by
    X-Hub-Signature-256 over the raw body before anything is read or stored."""
    receipts = service.verify_whatsapp(
        state(request).settings, await request.body(), request.headers.get("x-hub-signature-256")
    )
    results: list[str] = []
    # One transaction each: applying a receipt enters its delivery's tenant, and the next status
    # may be another tenant's (one business number serves every tenant). A 409 for one still
    # processing leaves those before it applied; Meta's retry finds them final and moves nothing.
    for receipt in receipts:
        async with all_tenants_transaction(request) as conn:
            results.append((await service.apply(conn, receipt)).result)
    return ReceiptResults.model_validate({"results": results})


@router.get(
    "/whatsapp/webhook",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def whatsapp_subscription(
    request: Request,
    mode: str | None = Query(default=None, alias="hub.mode", max_length=32),
    verify_token: str | None = Query(default=None, alias="hub.verify_token", max_length=512),
    challenge: str | None = Query(default=None, alias="hub.challenge", max_length=512),
) -> PlainTextResponse:
    """Meta's subscription handshake: the challenge echoed as text when the verify token is
    this deployment's."""
    answer = service.verify_whatsapp_subscription(
        state(request).settings, mode, verify_token, challenge
    )
    return PlainTextResponse(answer)
