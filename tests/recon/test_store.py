"""The job's tables on a real PostgreSQL: figures added per micro-batch, windows published
once closed and again (one revision up) when changed, replays applied once, the missing ids,
and the Prometheus gauges read from them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from wayline.recon import reconciliation, store
from wayline.recon.figures import Counts, Emitted
from wayline.recon.metrics import ReconMetrics
from wayline.registry.access import ADMIN

pytestmark = pytest.mark.integration

T = 1_772_355_600_000  # 2026-03-01T09:00:00Z, a window boundary
S = 1000


@pytest.fixture
def recon_id(database, settings, unique) -> str:
    body = reconciliation.ReconciliationIn(
        name=f"store-{unique}",
        expected=reconciliation.SideIn(role="producer-expected", topics=["audit"]),
        actual=reconciliation.SideIn(role="actual", topics=["events"]),
        periods=reconciliation.PeriodsIn(o=timedelta(seconds=60), n=timedelta(seconds=10),
                                         m=timedelta(seconds=120), z=timedelta(seconds=60)),
    )
    with database.transaction() as session:
        return reconciliation.create(session, ADMIN, body, reconciliation.OutputTopics.from_settings(settings)).id


def test_windows_are_published_when_closed_and_again_when_changed(database, recon_id, unique) -> None:
    job = f"job-{unique}"

    def apply(batch_id: int, changes: list[tuple[int, Counts]], mark: int, emitted=()) -> list[store.Window] | None:
        with database.transaction() as session:
            return store.apply_batch(session, job, batch_id, {recon_id: 60 * S}, {recon_id: 10 * S},
                                     [store.WindowChange(recon_id, "shop", w, c) for w, c in changes],
                                     {recon_id: mark}, list(emitted))

    missing = Emitted("missing", "e-2", "shop", T + 2 * S, None, T + 15 * S)
    assert apply(0, [(T, Counts(expected=2, matched=1, missing=1))], T + 15 * S, [(recon_id, missing)]) == []
    with database.transaction() as session:  # still open: figures kept, nothing published
        assert [(w.counts.expected, w.revision) for w in store.windows(session, recon_id, 10)] == [(2, 0)]
        assert [m["id"] for m in store.missing_ids(session, recon_id, None, 10, 10).data] == ["e-2"]
    first = apply(1, [], T + 70 * S)  # the watermark passes the end plus n
    assert [(w.window_start, w.counts, w.revision, w.completeness) for w in first] == [
        (T, Counts(expected=2, matched=1, missing=1), 1, 50.0)]
    assert apply(1, [(T, Counts(matched=1))], T + 70 * S) is None  # a replay changes nothing
    found = Emitted("found", "e-2", "shop", T + 2 * S, T + 20 * S, T + 75 * S)
    second = apply(2, [(T, Counts(matched=1, missing=-1, found=1, late=1))], T + 75 * S, [(recon_id, found)])
    assert [(w.counts, w.revision) for w in second] == [
        (Counts(expected=2, matched=2, missing=0, found=1, late=1), 2)]
    assert apply(3, [], T + 90 * S) == []  # unchanged: not published again
    with database.transaction() as session:
        assert store.missing_count(session, recon_id) == 0
        assert store.watermark(session, recon_id) == T + 90 * S
        assert [(w.counts.matched, w.revision) for w in store.windows(session, recon_id, 10)] == [(2, 2)]

    registry = CollectorRegistry()
    registry.register(ReconMetrics(database))
    text = generate_latest(registry).decode()
    name = f"store-{unique}"
    assert f'wayline_recon_completeness_percent{{reconciliation="{name}",source="shop"}} 100.0' in text
    assert f'wayline_recon_missing_ids{{reconciliation="{name}"}} 0.0' in text
    assert f'wayline_recon_window_ids{{figure="late",reconciliation="{name}",source="shop"}} 1.0' in text
    assert f'wayline_recon_watermark_seconds{{reconciliation="{name}"}} 1.77235569e+09' in text


def test_changes_for_a_removed_reconciliation_are_skipped(database, recon_id, unique) -> None:
    with database.transaction() as session:
        reconciliation.delete(session, ADMIN, recon_id)
    with database.transaction() as session:
        published = store.apply_batch(session, f"job-{unique}", 0, {recon_id: 60 * S}, {recon_id: 10 * S},
                                      [store.WindowChange(recon_id, "shop", T, Counts(expected=1))],
                                      {recon_id: T}, [(recon_id, Emitted("missing", "x", "shop", T, None, T))])
    assert published == []
