from typing import Annotated

from fastapi import APIRouter, Body, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, OnceDep, PagingDep
from wayline.registry import reference
from wayline.registry.access import Page

router = APIRouter(prefix="/reference-tables", tags=["rules"], route_class=JsonRoute)


@router.post("", status_code=201, response_model=reference.ReferenceTableOut)
def create_table(body: reference.ReferenceTableIn, caller: CallerDep, once: OnceDep):
    return once(body, lambda s: reference.create_table(s, caller, body))


@router.get("", response_model=Page[reference.ReferenceTableOut])
def list_tables(db: DB, caller: CallerDep, paging: PagingDep):
    with db.transaction() as session:
        return reference.list_tables(session, caller, paging.cursor, paging.limit, paging.max_limit)


@router.get("/{name}", response_model=reference.ReferenceTableOut)
def get_table(name: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return reference.get_table(session, caller, name)


@router.delete("/{name}", status_code=204)
def delete_table(name: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        reference.delete_table(session, caller, name)
    return Response(status_code=204)


@router.put("/{name}/rows")
def put_rows(name: str, rows: Annotated[list[reference.ReferenceRowIn], Body(max_length=reference.MAX_ROWS_PER_PUT)],
             db: DB, caller: CallerDep):
    """Insert or replace up to 10,000 rows by key; running join rules see them within seconds."""
    with db.transaction() as session:
        return {"put": reference.put_rows(session, caller, name, rows)}


@router.get("/{name}/rows/{key}", response_model=reference.ReferenceRowOut)
def get_row(name: str, key: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return reference.get_row(session, caller, name, key)


@router.delete("/{name}/rows/{key}", status_code=204)
def delete_row(name: str, key: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        reference.delete_row(session, caller, name, key)
    return Response(status_code=204)


__all__ = ["router"]
