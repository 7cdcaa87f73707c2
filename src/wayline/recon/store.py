"""What the recon job keeps in PostgreSQL: figures per window, the ids missing now, progress.

- ``recon_metrics``: one row per (reconciliation, source, window). Each micro-batch *adds*
  its changes; ``revision`` 0 means not yet published. A window is published (revision 1)
  once the watermark has passed its end plus ``n`` (every expected id in it is decided),
  and published again, one revision up, whenever a later micro-batch changes it (late
  data within ``m``): the row is replaced in place, and the event names the revision.
- ``recon_missing``: the ids reported missing and not found since.
- ``recon_batches``: the last micro-batch each job applied. A micro-batch replayed after
  a crash finds its id there and changes nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel
from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    and_,
    delete,
    func,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from wayline.core.errors import RejectedInput
from wayline.recon.events import completeness, iso
from wayline.recon.figures import COUNT_NAMES, Counts, Emitted
from wayline.registry.access import Page, decode_cursor, encode_cursor
from wayline.registry.models import Base, Reconciliation


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


class ReconMetric(Base):
    __tablename__ = "recon_metrics"
    reconciliation_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("reconciliations.id", ondelete="CASCADE"), primary_key=True)
    source: Mapped[str] = mapped_column(Text, primary_key=True)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    window_end: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    expected: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    matched: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    missing: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    found: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    duplicates: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    late: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    too_late: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    unreadable: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    revision: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    changed: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class ReconMissing(Base):
    __tablename__ = "recon_missing"
    reconciliation_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("reconciliations.id", ondelete="CASCADE"), primary_key=True)
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    source: Mapped[str] = mapped_column(Text, nullable=False)
    expected_time: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class ReconProgress(Base):
    __tablename__ = "recon_progress"
    reconciliation_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("reconciliations.id", ondelete="CASCADE"), primary_key=True)
    watermark: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class ReconBatch(Base):
    __tablename__ = "recon_batches"
    job: Mapped[str] = mapped_column(Text, primary_key=True)
    batch_id: Mapped[int] = mapped_column(BigInteger, nullable=False)


@dataclass(frozen=True)
class WindowChange:
    reconciliation_id: str
    source: str
    window_start: int  # ms
    counts: Counts


@dataclass(frozen=True)
class Window:
    """A window's figures as published (or, with revision 0, as they stand unpublished)."""

    reconciliation_id: str
    source: str
    window_start: int
    window_end: int
    counts: Counts
    revision: int

    @property
    def completeness(self) -> float:
        return completeness(self.counts.expected, self.counts.matched)

    def figures(self) -> dict[str, Any]:
        return {"source": self.source, "window_start": self.window_start, "window_end": self.window_end,
                "revision": self.revision, **{name: getattr(self.counts, name) for name in COUNT_NAMES}}


# A window's figures as the API and the CLI show them (no docstring: it would enter the OpenAPI schema).
class WindowOut(BaseModel):
    source: str
    window_start: str
    window_end: str
    expected: int
    matched: int
    missing: int
    found: int
    duplicates: int
    late: int
    too_late: int
    unreadable: int  # records of the reconciliation's topics it could not read (also quarantined)
    completeness: float
    revision: int  # 0: the window is still open, not yet published


def window_out(window: Window) -> WindowOut:
    figures: dict[str, Any] = window.figures()
    figures.update(window_start=iso(window.window_start), window_end=iso(window.window_end),
                   completeness=window.completeness)
    return WindowOut(**figures)


def _window(row: ReconMetric) -> Window:
    return Window(row.reconciliation_id, row.source, _ms(row.window_start), _ms(row.window_end),
                  Counts(**{name: getattr(row, name) for name in COUNT_NAMES}), row.revision)


def apply_batch(
    session: Session, job: str, batch_id: int, o_by_recon: dict[str, int], n_by_recon: dict[str, int],
    changes: Sequence[WindowChange], watermarks: dict[str, int], emitted: Sequence[tuple[str, Emitted]],
) -> list[Window] | None:
    """Apply one micro-batch; the windows to publish now, or None if the batch was applied before."""
    done = session.scalar(select(ReconBatch.batch_id).where(ReconBatch.job == job).with_for_update())
    if done is not None and done >= batch_id:
        return None
    session.execute(insert(ReconBatch).values(job=job, batch_id=batch_id).on_conflict_do_update(
        index_elements=[ReconBatch.job], set_={"batch_id": batch_id}))
    now = datetime.now(timezone.utc)
    # The job's set may be a poll behind: a reconciliation deleted since has no rows to add to.
    known = set(session.scalars(select(Reconciliation.id).where(Reconciliation.id.in_(list(o_by_recon)))))
    for change in changes:
        if change.reconciliation_id not in known or not change.counts:
            continue
        values = {name: getattr(change.counts, name) for name in COUNT_NAMES}
        table = ReconMetric.__table__
        statement = insert(ReconMetric).values(
            reconciliation_id=change.reconciliation_id, source=change.source,
            window_start=_dt(change.window_start),
            window_end=_dt(change.window_start + o_by_recon[change.reconciliation_id]),
            revision=0, changed=True, updated_at=now, **values,
        )
        session.execute(statement.on_conflict_do_update(
            index_elements=[ReconMetric.reconciliation_id, ReconMetric.source, ReconMetric.window_start],
            set_={**{name: table.c[name] + statement.excluded[name] for name in COUNT_NAMES},
                  "changed": True, "updated_at": now},
        ))
    for reconciliation_id, event in emitted:
        if reconciliation_id not in known:
            continue
        if event.kind == "missing":
            session.execute(insert(ReconMissing).values(
                reconciliation_id=reconciliation_id, id=event.id, source=event.source,
                expected_time=_dt(event.expected_time), reported_at=now).on_conflict_do_nothing())
        else:
            session.execute(delete(ReconMissing).where(ReconMissing.reconciliation_id == reconciliation_id,
                                                       ReconMissing.id == event.id))
    published: list[Window] = []
    for reconciliation_id, mark in watermarks.items():
        if reconciliation_id not in known:
            continue
        statement = insert(ReconProgress).values(reconciliation_id=reconciliation_id, watermark=_dt(mark),
                                                 updated_at=now)
        session.execute(statement.on_conflict_do_update(
            index_elements=[ReconProgress.reconciliation_id],
            set_={"watermark": func.greatest(ReconProgress.__table__.c.watermark, statement.excluded.watermark),
                  "updated_at": now}))
    for reconciliation_id in known:
        mark = session.scalar(select(ReconProgress.watermark).where(
            ReconProgress.reconciliation_id == reconciliation_id))
        if mark is None:
            continue
        closed_before = _dt(_ms(mark) - n_by_recon[reconciliation_id])
        rows = session.scalars(
            update(ReconMetric)
            .where(ReconMetric.reconciliation_id == reconciliation_id,
                   or_(and_(ReconMetric.revision == 0, ReconMetric.window_end <= closed_before),
                       and_(ReconMetric.revision > 0, ReconMetric.changed.is_(True))))
            .values(revision=ReconMetric.revision + 1, changed=False)
            .returning(ReconMetric)
        )
        published += sorted((_window(row) for row in rows), key=lambda w: (w.window_start, w.source))
    return published


def windows(session: Session, reconciliation_id: str, limit: int) -> list[Window]:
    """The newest windows, published or not, newest first."""
    rows = session.scalars(select(ReconMetric).where(ReconMetric.reconciliation_id == reconciliation_id)
                           .order_by(ReconMetric.window_start.desc(), ReconMetric.source).limit(limit))
    return [_window(row) for row in rows]


def watermark(session: Session, reconciliation_id: str) -> int | None:
    mark = session.scalar(select(ReconProgress.watermark).where(ReconProgress.reconciliation_id == reconciliation_id))
    return None if mark is None else _ms(mark)


def missing_ids(session: Session, reconciliation_id: str, cursor: str | None, limit: int,
                max_limit: int) -> Page[dict[str, Any]]:
    """The ids missing now, in id order."""
    if not 1 <= limit <= max_limit:
        raise RejectedInput(f"limit: must be between 1 and {max_limit}")
    query = select(ReconMissing).where(ReconMissing.reconciliation_id == reconciliation_id)
    if cursor:
        query = query.where(ReconMissing.id > decode_cursor(cursor))
    rows = list(session.scalars(query.order_by(ReconMissing.id).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page[dict[str, Any]](
        data=[{"id": r.id, "source": r.source, "expected_time": r.expected_time, "reported_at": r.reported_at}
              for r in rows],
        next_cursor=encode_cursor(rows[-1].id) if more else None,
    )


def missing_count(session: Session, reconciliation_id: str) -> int:
    return int(session.scalar(select(func.count()).select_from(ReconMissing)
                              .where(ReconMissing.reconciliation_id == reconciliation_id)) or 0)


def latest_published(session: Session) -> list[Window]:
    """Each (reconciliation, source)'s newest published window: what the gauges show."""
    newest = (select(ReconMetric.reconciliation_id, ReconMetric.source,
                     func.max(ReconMetric.window_start).label("start"))
              .where(ReconMetric.revision > 0).group_by(ReconMetric.reconciliation_id, ReconMetric.source)
              .subquery())
    rows = session.scalars(select(ReconMetric).where(
        tuple_(ReconMetric.reconciliation_id, ReconMetric.source, ReconMetric.window_start).in_(
            select(newest.c.reconciliation_id, newest.c.source, newest.c.start))))
    return [_window(row) for row in rows]


__all__ = [
    "ReconBatch", "ReconMetric", "ReconMissing", "ReconProgress", "Window", "WindowChange", "WindowOut", "apply_batch",
    "latest_published", "missing_count", "missing_ids", "watermark", "window_out", "windows",
]
