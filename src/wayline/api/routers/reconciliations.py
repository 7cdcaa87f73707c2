from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, OnceDep, PagingDep
from wayline.recon import reconciliation, store
from wayline.recon.events import iso
from wayline.registry.access import Page

router = APIRouter(prefix="/reconciliations", tags=["reconciliations"], route_class=JsonRoute)


class StatusOut(BaseModel):
    reconciliation: reconciliation.ReconciliationOut
    watermark: str | None
    missing_now: int
    windows: list[store.WindowOut]


@router.post("", status_code=201, response_model=reconciliation.ReconciliationOut)
def create_reconciliation(body: reconciliation.ReconciliationIn, request: Request, caller: CallerDep, once: OnceDep):
    outputs = reconciliation.OutputTopics.from_settings(request.app.state.settings)
    return once(body, lambda s: reconciliation.create(s, caller, body, outputs))


@router.get("", response_model=Page[reconciliation.ReconciliationOut])
def list_reconciliations(db: DB, caller: CallerDep, paging: PagingDep):
    with db.transaction() as session:
        return reconciliation.list_(session, caller, paging.cursor, paging.limit, paging.max_limit)


@router.get("/{reconciliation_id}", response_model=reconciliation.ReconciliationOut)
def get_reconciliation(reconciliation_id: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return reconciliation.get(session, caller, reconciliation_id)


@router.patch("/{reconciliation_id}", response_model=reconciliation.ReconciliationOut)
def update_reconciliation(reconciliation_id: str, body: reconciliation.ReconciliationPatch, request: Request, db: DB,
                          caller: CallerDep):
    outputs = reconciliation.OutputTopics.from_settings(request.app.state.settings)
    with db.transaction() as session:
        return reconciliation.update(session, caller, reconciliation_id, body, outputs)


@router.delete("/{reconciliation_id}", status_code=204)
def delete_reconciliation(reconciliation_id: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        reconciliation.delete(session, caller, reconciliation_id)
    return Response(status_code=204)


@router.get("/{reconciliation_id}/status", response_model=StatusOut)
def reconciliation_status(reconciliation_id: str, db: DB, caller: CallerDep,
                          windows: Annotated[int, Query(ge=1, le=500, description="newest windows to show")] = 20):
    """Completeness per source and window (newest first), the watermark, and how many ids are missing now."""
    with db.transaction() as session:
        found = reconciliation.get(session, caller, reconciliation_id)
        mark = store.watermark(session, reconciliation_id)
        return StatusOut(
            reconciliation=found, watermark=None if mark is None else iso(mark),
            missing_now=store.missing_count(session, reconciliation_id),
            windows=[store.window_out(w) for w in store.windows(session, reconciliation_id, windows)],
        )


@router.get("/{reconciliation_id}/missing", response_model=Page[dict[str, Any]])
def missing_ids(reconciliation_id: str, db: DB, caller: CallerDep, paging: PagingDep):
    """The ids reported missing and not found since, in id order."""
    with db.transaction() as session:
        reconciliation.get(session, caller, reconciliation_id)
        return store.missing_ids(session, reconciliation_id, paging.cursor, paging.limit, paging.max_limit)


__all__ = ["StatusOut", "router"]
