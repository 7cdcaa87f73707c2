"""Delivery attempts: every attempt of every delivery, newest first, filtered."""

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, PagingDep
from wayline.delivery.storage import attempt_log

router = APIRouter(prefix="/attempts", tags=["attempts"], route_class=JsonRoute)


@router.get("", response_model=attempt_log.AttemptPage)
def list_attempts(
    db: DB, caller: CallerDep, paging: PagingDep,
    endpoint_id: Annotated[str | None, Query()] = None,
    subscription_id: Annotated[str | None, Query()] = None,
    webhook_id: Annotated[str | None, Query()] = None,
    outcome: Annotated[attempt_log.AttemptOutcome | None,
                       Query(description="succeeded, failed, or held (not sent: no attempt)")] = None,
    since: Annotated[datetime | None, Query(description="attempted at or after")] = None,
    until: Annotated[datetime | None, Query(description="attempted before")] = None,
):
    with db.transaction() as session:
        return attempt_log.list_attempts(
            session, caller, endpoint_id=endpoint_id, subscription_id=subscription_id, webhook_id=webhook_id,
            outcome=outcome, since=since, until=until, cursor=paging.cursor, limit=paging.limit,
            max_limit=paging.max_limit,
        )


__all__ = ["router"]
