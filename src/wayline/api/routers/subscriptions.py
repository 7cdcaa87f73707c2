from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, OnceDep, PagingDep
from wayline.registry import subscription
from wayline.registry.access import Page
from wayline.registry.filter import FilterLimits

router = APIRouter(prefix="/subscriptions", tags=["subscriptions"], route_class=JsonRoute)


@router.post("", status_code=201, response_model=subscription.SubscriptionOut)
def create_subscription(body: subscription.SubscriptionIn, request: Request, caller: CallerDep, once: OnceDep):
    limits = FilterLimits.from_settings(request.app.state.settings)
    return once(body, lambda s: subscription.create(s, caller, body, limits))


@router.get("", response_model=Page[subscription.SubscriptionOut])
def list_subscriptions(db: DB, caller: CallerDep, paging: PagingDep, endpoint_id: Annotated[str | None, Query()] = None):
    with db.transaction() as session:
        return subscription.list_(session, caller, paging.cursor, paging.limit, paging.max_limit, endpoint_id)


@router.get("/{subscription_id}", response_model=subscription.SubscriptionOut)
def get_subscription(subscription_id: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return subscription.get(session, caller, subscription_id)


@router.patch("/{subscription_id}", response_model=subscription.SubscriptionOut)
def update_subscription(subscription_id: str, body: subscription.SubscriptionPatch, request: Request, db: DB,
                        caller: CallerDep):
    limits = FilterLimits.from_settings(request.app.state.settings)
    with db.transaction() as session:
        return subscription.update(session, caller, subscription_id, body, limits)


@router.delete("/{subscription_id}", status_code=204)
def delete_subscription(subscription_id: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        subscription.delete(session, caller, subscription_id)
    return Response(status_code=204)

__all__ = ["router"]
