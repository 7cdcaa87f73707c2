from fastapi import APIRouter, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, OnceDep, PagingDep
from wayline.registry import customer
from wayline.registry.access import Page

router = APIRouter(prefix="/customers", tags=["customers"], route_class=JsonRoute)


@router.post("", status_code=201, response_model=customer.CustomerOut)
def create_customer(body: customer.CustomerIn, caller: CallerDep, once: OnceDep):
    return once(body, lambda s: customer.create(s, caller, body))


@router.get("", response_model=Page[customer.CustomerOut])
def list_customers(db: DB, caller: CallerDep, paging: PagingDep):
    with db.transaction() as session:
        return customer.list_(session, caller, paging.cursor, paging.limit, paging.max_limit)


@router.get("/{customer_id}", response_model=customer.CustomerOut)
def get_customer(customer_id: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return customer.get(session, caller, customer_id)


@router.patch("/{customer_id}", response_model=customer.CustomerOut)
def update_customer(customer_id: str, body: customer.CustomerPatch, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return customer.update(session, caller, customer_id, body)


@router.delete("/{customer_id}", status_code=204)
def delete_customer(customer_id: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        customer.delete(session, caller, customer_id)
    return Response(status_code=204)

__all__ = ["router"]
