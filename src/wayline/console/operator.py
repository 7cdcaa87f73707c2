"""What an operator sees: customers, tenants, event types, the running jobs, rules with
their metrics and quarantine state, reconciliation completeness. Admin keys only, as in
the API (a customer key gets the API's 403)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from wayline.recon import reconciliation, store
from wayline.registry import catalog, customer, rule

from .jobs import JOBS, JobsWatch, by_label
from .pages import PREFIX, ConsoleRoute, FormDep, ViewerDep, back_to, database_of, render, settings_of

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)

Cursor = Annotated[str | None, Query()]
# Newest windows shown per reconciliation: each source's latest few.
RECON_WINDOWS = 12
RULE_METRICS = {"input": "wayline_rule_input_events", "matches": "wayline_rule_matches",
                "seconds": "wayline_rule_evaluation_seconds", "state": "wayline_rule_state_entries",
                "late": "wayline_rule_late_events"}


def _watch(request: Request) -> JobsWatch:
    return request.app.state.console_jobs


def _limits(request: Request) -> tuple[int, int]:
    settings = settings_of(request)
    return settings.console.page_size, settings.registry.max_page_size


@router.get("/customers", response_class=HTMLResponse)
def customers(request: Request, who: ViewerDep, cursor: Cursor = None):
    who.caller.require_admin()
    with database_of(request).transaction() as session:
        found = customer.list_(session, who.caller, cursor, *_limits(request))
    return render(request, "customers.html", who, page=found, cursor=cursor)


@router.get("/tenants", response_class=HTMLResponse)
def tenants(request: Request, who: ViewerDep, cursor: Cursor = None):
    who.caller.require_admin()
    with database_of(request).transaction() as session:
        found = catalog.list_tenants(session, who.caller, cursor, *_limits(request))
    return render(request, "tenants.html", who, page=found, cursor=cursor)


@router.get("/event-types", response_class=HTMLResponse)
def event_types(request: Request, who: ViewerDep, cursor: Cursor = None):
    who.caller.require_admin()
    with database_of(request).transaction() as session:
        found = catalog.list_event_types(session, who.caller, cursor, *_limits(request))
    return render(request, "event_types.html", who, page=found, cursor=cursor)


@router.get("/jobs", response_class=HTMLResponse)
def jobs(request: Request, who: ViewerDep):
    who.caller.require_admin()
    statuses = _watch(request).read_all(settings_of(request))
    return render(request, "jobs.html", who, jobs=statuses)


@router.get("/rules", response_class=HTMLResponse)
def rules(request: Request, who: ViewerDep, cursor: Cursor = None):
    who.caller.require_admin()
    with database_of(request).transaction() as session:
        found = rule.list_(session, who.caller, cursor, *_limits(request))
    rules_job = _watch(request).read(next(spec for spec in JOBS if spec.name == "rules"), settings_of(request))
    metrics = {name: by_label(rules_job.samples, family, "rule_id") for name, family in RULE_METRICS.items()}
    return render(request, "rules.html", who, page=found, cursor=cursor, metrics=metrics, job=rules_job)


@router.post("/rules/{rule_id}/enable")
def enable_rule(request: Request, rule_id: str, who: ViewerDep, form: FormDep):
    """Re-enable a quarantined (or stopped) rule: the job runs it again from its next reload."""
    policy = rule.RulePolicy.from_settings(settings_of(request))
    with database_of(request).transaction() as session:
        rule.update(session, who.caller, rule_id, rule.RulePatch(enabled=True), policy)
    return back_to("/rules")


@router.get("/reconciliations", response_class=HTMLResponse)
def reconciliations(request: Request, who: ViewerDep, cursor: Cursor = None):
    who.caller.require_admin()
    with database_of(request).transaction() as session:
        found = reconciliation.list_(session, who.caller, cursor, *_limits(request))
        windows = {r.id: store.windows(session, r.id, RECON_WINDOWS) for r in found.data}
        missing = {r.id: store.missing_count(session, r.id) for r in found.data}
    return render(request, "reconciliations.html", who, page=found, cursor=cursor, windows=windows, missing=missing)


__all__ = ["router"]
