"""The delivery self-audit: a built-in reconciliation proving each consumed record reached one outcome.

The delivery job writes, per unit it consumes (:mod:`wayline.delivery.audit`: an event and
subscription pair, or a quarantined record), a CloudEvent on ``audit.consumed_topic``
(``data``: ``record``, ``event_id``, ``event_time``, ``topic``) and, per final outcome, one
on ``audit.outcomes_topic`` (the same ``data`` plus ``outcome``: delivered, quarantined or
dead_lettered). The reconciliation named :data:`NAME`
reads both by ``data.record`` (id), ``data.event_time`` (time) and ``data.topic`` (source):
a consumed record with no outcome is *missing*, a second outcome a *duplicate*. So "every
consumed record reached exactly one final outcome" reads as completeness 100 % and no
duplicates, per source topic and window.

Its correction window ``m`` outlasts the longest retry schedule (with jitter), so the
outcome of a record that went through every retry still matches; ``n`` is when an outcome
is overdue, and a record that comes back from retries after it is reported missing is
*found* and its window corrected.
"""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.recon import reconciliation as service
from wayline.recon.periods import BOUNDS_MS
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.models import Reconciliation

NAME = "delivery-self-audit"
# The correction window's margin past the longest retry schedule.
M_MARGIN_S = 3600


def correction_window_s(settings: Settings) -> int:
    """``m``: the retry schedule at its longest (every delay stretched by the jitter) plus a margin."""
    longest = sum(settings.delivery.retry_schedule_s) * (1 + settings.delivery.retry_jitter)
    return min(math.ceil(longest) + M_MARGIN_S, BOUNDS_MS["m"][1] // 1000)


def _wanted(settings: Settings) -> service.ReconciliationIn:
    audit = settings.audit
    read = {"id": "data.record", "time": "data.event_time", "source": "data.topic"}
    return service.ReconciliationIn(
        name=NAME,
        expected=service.SideIn(role="consumer-expected", topics=[audit.consumed_topic], **read),
        actual=service.SideIn(role="actual", topics=[audit.outcomes_topic], **read),
        periods=service.PeriodsIn(o=timedelta(seconds=audit.o_s), n=timedelta(seconds=audit.n_s),
                                  m=timedelta(seconds=correction_window_s(settings)),
                                  z=timedelta(seconds=audit.z_s)),
    )


def ensure(database: Database, settings: Settings) -> service.ReconciliationOut:
    """Create the audit topics and the self-audit reconciliation, or bring it in line with the
    settings (enabled again if it was disabled). Idempotent: an unchanged one keeps its
    revision, so a running recon job does not restart."""
    ensure_topics(settings.kafka_bootstrap(), [settings.audit.consumed_topic, settings.audit.outcomes_topic],
                  settings.kafka.topic_partitions)
    wanted = _wanted(settings)
    try:
        return _create_or_update(database, settings, wanted)
    except Conflict:  # another process created it between our look and our insert
        return _create_or_update(database, settings, wanted)


def _create_or_update(database: Database, settings: Settings,
                      wanted: service.ReconciliationIn) -> service.ReconciliationOut:
    with database.transaction() as session:
        existing = find(session)
        outputs = service.OutputTopics.from_settings(settings)
        if existing is None:
            return service.create(session, ADMIN, wanted, outputs)
        return service.update(session, ADMIN, existing, service.ReconciliationPatch(
            expected=wanted.expected, actual=wanted.actual, periods=wanted.periods, enabled=True), outputs)


def find(session: Session) -> str | None:
    """The self-audit reconciliation's id, if it was set up."""
    return session.scalar(select(Reconciliation.id).where(Reconciliation.name == NAME))


__all__ = ["NAME", "correction_window_s", "ensure", "find"]
