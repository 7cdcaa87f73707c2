"""What a customer sees and does: endpoints, subscriptions, attempts, dead letters, health.

Every read and change goes through the services the JSON API uses with the signed-in
key's caller, so the console allows exactly what the API allows: another customer's
endpoint is a 404 here as there.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from wayline.core.errors import RejectedInput
from wayline.delivery.storage import attempt_log, dead_letter
from wayline.registry import catalog, subscription
from wayline.registry.endpoint import EndpointIn, EndpointPatch, EndpointService, RotateIn
from wayline.registry.filter import FilterLimits

from .charts import health_chart
from .forms import checked, listed, numbers, text
from .pages import PREFIX, ConsoleRoute, FormDep, ViewerDep, back_to, database_of, render, settings_of

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

HEALTH_SPAN = timedelta(hours=1)
HEALTH_BUCKET = timedelta(minutes=5)
Cursor = Annotated[str | None, Query()]


def _service(request: Request) -> EndpointService:
    return request.app.state.endpoints


def _page_size(request: Request) -> tuple[int, int]:
    settings = settings_of(request)
    return settings.console.page_size, settings.registry.max_page_size


def _since(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise RejectedInput(f"{name}: a date and time like 2026-11-24T14:00") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# ---- endpoints ------------------------------------------------------------------------------------

@router.get("/endpoints", response_class=HTMLResponse)
def endpoints(request: Request, who: ViewerDep, cursor: Cursor = None):
    limit, max_limit = _page_size(request)
    with database_of(request).transaction() as session:
        found = _service(request).list_(session, who.caller, cursor, limit, max_limit)
    return render(request, "endpoints.html", who, page=found, cursor=cursor)


@router.post("/endpoints")
def create_endpoint(request: Request, who: ViewerDep, form: FormDep):
    body = EndpointIn.model_validate({
        "url": text(form, "url") or "", "description": text(form, "description") or "",
        "customer_id": text(form, "customer_id"), "retry_schedule_s": numbers(form, "retry_schedule_s"),
    })
    with database_of(request).transaction() as session:
        created = _service(request).create(session, who.caller, body)
    return back_to(f"/endpoints/{created.id}")


@router.get("/endpoints/{endpoint_id}", response_class=HTMLResponse)
def endpoint(request: Request, endpoint_id: str, who: ViewerDep):
    service, settings = _service(request), settings_of(request)
    now = datetime.now(UTC)
    since = now - HEALTH_SPAN
    limit, max_limit = _page_size(request)
    with database_of(request).transaction() as session:
        found = service.get(session, who.caller, endpoint_id)
        secrets = service.secrets(session, who.caller, endpoint_id)
        subscriptions = subscription.list_(session, who.caller, None, limit, max_limit, endpoint_id)
        buckets = attempt_log.endpoint_health(session, who.caller, endpoint_id, since, HEALTH_BUCKET)
        overall = attempt_log.endpoint_health(session, who.caller, endpoint_id, since)
    chart = health_chart(buckets, overall[0] if overall else None, since, HEALTH_SPAN, HEALTH_BUCKET)
    schedule = found.retry_schedule_s or settings.delivery.retry_schedule_s
    return render(request, "endpoint.html", who, endpoint=found, secrets=secrets, subscriptions=subscriptions,
                  chart=chart, schedule=schedule, own_schedule=found.retry_schedule_s is not None,
                  overlap_s=settings.registry.secret_overlap_s)


@router.post("/endpoints/{endpoint_id}")
def edit_endpoint(request: Request, endpoint_id: str, who: ViewerDep, form: FormDep):
    changes: dict[str, object] = {"url": text(form, "url"), "description": text(form, "description") or "",
                                  "retry_schedule_s": numbers(form, "retry_schedule_s")}
    if text(form, "timeout_ms"):
        changes["timeout_ms"] = text(form, "timeout_ms")
    with database_of(request).transaction() as session:
        _service(request).update(session, who.caller, endpoint_id, EndpointPatch.model_validate(changes))
    return back_to(f"/endpoints/{endpoint_id}")


@router.post("/endpoints/{endpoint_id}/enabled")
def switch_endpoint(request: Request, endpoint_id: str, who: ViewerDep, form: FormDep):
    enabled = text(form, "enabled") == "true"
    patch = EndpointPatch(enabled=enabled, disabled_reason=None if enabled else text(form, "reason"))
    with database_of(request).transaction() as session:
        _service(request).update(session, who.caller, endpoint_id, patch)
    return back_to(f"/endpoints/{endpoint_id}")


@router.post("/endpoints/{endpoint_id}/test")
def test_endpoint(request: Request, endpoint_id: str, who: ViewerDep, form: FormDep):
    try:
        data = orjson.loads(text(form, "data") or "{}")
    except orjson.JSONDecodeError as exc:
        raise RejectedInput(f"data: not JSON ({exc})") from exc
    body = dead_letter.TestEventIn.model_validate({"data": data})
    sent = dead_letter.send_test_event(database_of(request), who.caller, endpoint_id, body, settings_of(request).api)
    return back_to("/attempts", endpoint_id=endpoint_id, webhook_id=sent.webhook_id)


@router.post("/endpoints/{endpoint_id}/rotate")
def rotate_secret(request: Request, endpoint_id: str, who: ViewerDep, form: FormDep):
    with database_of(request).transaction() as session:
        _service(request).rotate(session, who.caller, endpoint_id, RotateIn())
    return back_to(f"/endpoints/{endpoint_id}")


# ---- subscriptions --------------------------------------------------------------------------------

@router.get("/subscriptions", response_class=HTMLResponse)
def subscriptions(request: Request, who: ViewerDep, cursor: Cursor = None, endpoint_id: Cursor = None):
    limit, max_limit = _page_size(request)
    with database_of(request).transaction() as session:
        found = subscription.list_(session, who.caller, cursor, limit, max_limit, endpoint_id)
        # The create form's choices of endpoint and event type: the first page is enough to pick from.
        choices = _service(request).list_(session, who.caller, None, max_limit, max_limit).data
        types = catalog.list_event_types(session, who.caller, None, max_limit, max_limit)
    return render(request, "subscriptions.html", who, page=found, cursor=cursor, endpoint_id=endpoint_id,
                  endpoints=choices, event_types=types)


@router.post("/subscriptions")
def create_subscription(request: Request, who: ViewerDep, form: FormDep):
    raw_filter = text(form, "filter")
    try:
        content_filter = orjson.loads(raw_filter) if raw_filter else None
    except orjson.JSONDecodeError as exc:
        raise RejectedInput(f"filter: not JSON ({exc})") from exc
    body = subscription.SubscriptionIn.model_validate({
        "endpoint_id": text(form, "endpoint_id") or "",
        "event_types": checked(form, "event_types") + listed(form, "more_event_types"),
        "tenant_scope": text(form, "tenant_scope") or "all", "tenants": listed(form, "tenants"),
        "filter": content_filter, "mode": text(form, "mode") or "streaming",
        "max_count": text(form, "max_count"), "max_wait_ms": text(form, "max_wait_ms"),
    })
    limits = FilterLimits.from_settings(settings_of(request))
    with database_of(request).transaction() as session:
        subscription.create(session, who.caller, body, limits)
    return back_to("/subscriptions", endpoint_id=body.endpoint_id)


@router.post("/subscriptions/{subscription_id}/enabled")
def switch_subscription(request: Request, subscription_id: str, who: ViewerDep, form: FormDep):
    patch = subscription.SubscriptionPatch(enabled=text(form, "enabled") == "true")
    limits = FilterLimits.from_settings(settings_of(request))
    with database_of(request).transaction() as session:
        subscription.update(session, who.caller, subscription_id, patch, limits)
    return back_to("/subscriptions")


# ---- attempts and dead letters --------------------------------------------------------------------

# The attempts list's outcome choices: by default the attempts only, since held-back
# deliveries (not sent) can outnumber them by hundreds to one while an endpoint hangs.
ATTEMPTS, EVERYTHING = "", "all"
OUTCOMES = (ATTEMPTS, "succeeded", "failed", "held", EVERYTHING)
# Held-back deliveries counted at most, for the note that says how many the list leaves out.
HELD_COUNTED = 10_000


@router.get("/attempts", response_class=HTMLResponse)
def attempts(request: Request, who: ViewerDep, cursor: Cursor = None, endpoint_id: Cursor = None,
             outcome: Cursor = None, since: Cursor = None, until: Cursor = None, webhook_id: Cursor = None):
    limit, max_limit = _page_size(request)
    outcome = outcome or ATTEMPTS
    if outcome not in OUTCOMES:
        raise RejectedInput("outcome: succeeded, failed, held or all")
    chosen = {"endpoint_id": endpoint_id or None, "webhook_id": webhook_id or None,
              "since": _since(since, "since"), "until": _since(until, "until")}
    with database_of(request).transaction() as session:
        found = attempt_log.list_attempts(
            session, who.caller, **chosen, outcome=None if outcome in (ATTEMPTS, EVERYTHING) else outcome,
            held=outcome != ATTEMPTS, cursor=cursor, limit=limit, max_limit=max_limit)
        held = attempt_log.count_held(session, who.caller, **chosen, at_most=HELD_COUNTED) \
            if outcome == ATTEMPTS else 0
    filters = {"endpoint_id": endpoint_id, "outcome": outcome, "since": since, "until": until,
               "webhook_id": webhook_id}
    return render(request, "attempts.html", who, page=found, cursor=cursor, filters=filters, held=held,
                  held_capped=held >= HELD_COUNTED)


@router.get("/dead-letters", response_class=HTMLResponse)
def dead_letters(request: Request, who: ViewerDep, cursor: Cursor = None, endpoint_id: Cursor = None):
    limit, max_limit = _page_size(request)
    with database_of(request).transaction() as session:
        found = dead_letter.poll_dead_letters(session, who.caller, cursor, limit, max_limit, endpoint_id or None)
    # The poll's cursor always moves on; there is a next page only when this one was full.
    more = len(found.data) == limit
    return render(request, "dead_letters.html", who, page=found, more=more, cursor=cursor, endpoint_id=endpoint_id)


@router.post("/dead-letters")
def act_on_dead_letters(request: Request, who: ViewerDep, form: FormDep):
    chosen = checked(form, "id")
    if not chosen:
        raise RejectedInput("select at least one dead letter first")
    action = text(form, "action")
    if action not in ("replay", "acknowledge"):
        raise RejectedInput("action: replay or acknowledge")
    with database_of(request).transaction() as session:
        for dead_letter_id in chosen:
            if action == "replay":
                dead_letter.replay_dead_letter(session, who.caller, dead_letter_id)
            else:
                dead_letter.acknowledge_dead_letter(session, who.caller, dead_letter_id)
    return back_to("/dead-letters", endpoint_id=text(form, "endpoint_id"), cursor=text(form, "cursor"))


__all__ = ["router"]
