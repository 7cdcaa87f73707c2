"""Dead letters: poll with a cursor (long poll optional), acknowledge, replay."""

import time
from typing import Annotated

from fastapi import APIRouter, Query, Response

from wayline.api.bodies import JsonRoute
from wayline.api.deps import DB, CallerDep, PagingDep
from wayline.delivery.storage import dead_letter

router = APIRouter(prefix="/dead-letters", tags=["dead letters"], route_class=JsonRoute)

# A long poll holds one server thread; longer waits are better spent reconnecting.
MAX_WAIT_S = 30.0
POLL_INTERVAL_S = 0.5


@router.get("", response_model=dead_letter.DeadLetterPage)
def poll_dead_letters(
    db: DB, caller: CallerDep, paging: PagingDep,
    endpoint_id: Annotated[str | None, Query()] = None,
    wait_s: Annotated[float, Query(ge=0, le=MAX_WAIT_S, description="wait this long for one to arrive")] = 0,
):
    """Dead letters after the cursor, oldest first. `next_cursor` is always set: poll again from it."""
    deadline = time.monotonic() + wait_s
    while True:
        with db.transaction() as session:
            found = dead_letter.poll_dead_letters(session, caller, paging.cursor, paging.limit, paging.max_limit, endpoint_id)
        if found.data or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_INTERVAL_S)


@router.post("/ack", response_model=dead_letter.Acknowledged)
def acknowledge_up_to(body: dead_letter.AckUpTo, db: DB, caller: CallerDep):
    """Acknowledge (delete) every dead letter up to and including a poll's cursor."""
    with db.transaction() as session:
        return dead_letter.acknowledge_up_to(session, caller, body)


@router.post("/replay", response_model=dead_letter.Replayed, status_code=202)
def replay_range(body: dead_letter.ReplayRange, db: DB, caller: CallerDep):
    """Send again every dead letter of an endpoint dead-lettered in [since, until), same webhook ids."""
    with db.transaction() as session:
        return dead_letter.replay_dead_letters(session, caller, body)


@router.get("/{dead_letter_id}", response_model=dead_letter.DeadLetterOut)
def get_dead_letter(dead_letter_id: str, db: DB, caller: CallerDep):
    with db.transaction() as session:
        return dead_letter.get_dead_letter(session, caller, dead_letter_id)


@router.delete("/{dead_letter_id}", status_code=204)
def acknowledge(dead_letter_id: str, db: DB, caller: CallerDep) -> Response:
    with db.transaction() as session:
        dead_letter.acknowledge_dead_letter(session, caller, dead_letter_id)
    return Response(status_code=204)


@router.post("/{dead_letter_id}/replay", response_model=dead_letter.Replayed, status_code=202)
def replay(dead_letter_id: str, db: DB, caller: CallerDep):
    """Send this dead letter again from the start of the schedule, with the same webhook id."""
    with db.transaction() as session:
        return dead_letter.replay_dead_letter(session, caller, dead_letter_id)


__all__ = ["router"]
