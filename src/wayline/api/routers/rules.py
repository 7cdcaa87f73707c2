from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, OnceDep, PagingDep
from wayline.registry import rule
from wayline.registry.access import Page

router = APIRouter(prefix="/rules", tags=["rules"], route_class=JsonRoute)


@router.post("", status_code=201, response_model=rule.RuleOut)
def create_rule(body: rule.RuleIn, request: Request, caller: CallerDep, once: OnceDep):
    policy = rule.RulePolicy.from_settings(request.app.state.settings)
    return once(body, lambda s: rule.create(s, caller, body, policy))


@router.get("", response_model=Page[rule.RuleOut])
def list_rules(db: DB, caller: CallerDep, paging: PagingDep, status: Annotated[rule.Status | None, Query()] = None):
    with db.transaction() as session:
        return rule.list_(session, caller, paging.cursor, paging.limit, paging.max_limit, status)


@router.get("/{rule_id}", response_model=rule.RuleOut)
def get_rule(rule_id: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return rule.get(session, caller, rule_id)


@router.patch("/{rule_id}", response_model=rule.RuleOut)
def update_rule(rule_id: str, body: rule.RulePatch, request: Request, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return rule.update(session, caller, rule_id, body, rule.RulePolicy.from_settings(request.app.state.settings))


@router.delete("/{rule_id}", status_code=204)
def delete_rule(rule_id: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        rule.delete(session, caller, rule_id)
    return Response(status_code=204)

__all__ = ["router"]
