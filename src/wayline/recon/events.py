"""The CloudEvents a reconciliation emits: ``missing``, ``found`` and ``metrics``.

Ids are derived from what the event is about, so a micro-batch replayed after a crash
writes the same ids again (a consumer drops repeats by id), and a metrics event names its
window's revision: the higher revision of a window replaces the lower.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

from wayline.recon.figures import COUNT_NAMES, Emitted

MISSING_TYPE = "wayline.recon.missing"
FOUND_TYPE = "wayline.recon.found"
METRICS_TYPE = "wayline.recon.metrics"
SOURCE_PREFIX = "wayline/recon/"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _event_id(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:32]


def _envelope(name: str, type_: str, event_id: str, subject: str, time_ms: int, tenant: str,
              data: dict[str, Any]) -> dict[str, Any]:
    return {
        "specversion": "1.0", "id": event_id, "source": SOURCE_PREFIX + name, "type": type_,
        "subject": subject, "time": iso(time_ms), "tenantid": tenant, "datacontenttype": "application/json",
        "data": data,
    }


def id_event(reconciliation_id: str, name: str, tenant: str, emitted: Emitted) -> dict[str, Any]:
    """A ``missing`` or ``found`` event; its subject is the audited id."""
    data: dict[str, Any] = {
        "reconciliation_id": reconciliation_id, "id": emitted.id, "source": emitted.source,
        "expected_time": iso(emitted.expected_time), "watermark": iso(emitted.watermark),
    }
    if emitted.actual_time is not None:
        data["actual_time"] = iso(emitted.actual_time)
    return _envelope(name, MISSING_TYPE if emitted.kind == "missing" else FOUND_TYPE,
                     _event_id(reconciliation_id, emitted.kind, emitted.id, emitted.expected_time),
                     emitted.id, emitted.expected_time, tenant, data)


def completeness(expected: int, matched: int) -> float:
    """Matched as a percentage of expected; a window with nothing expected is complete."""
    return 100.0 if expected == 0 else round(100.0 * matched / expected, 3)


def metrics_event(reconciliation_id: str, name: str, tenant: str, figures: dict[str, Any]) -> dict[str, Any]:
    """One window's figures (``source``, ``window_start``/``window_end`` in ms, the counts, ``revision``)."""
    data = {
        "reconciliation_id": reconciliation_id, "source": figures["source"],
        "window_start": iso(figures["window_start"]), "window_end": iso(figures["window_end"]),
        **{name_: figures[name_] for name_ in COUNT_NAMES},
        "completeness": completeness(figures["expected"], figures["matched"]),
        "revision": figures["revision"],
    }
    return _envelope(name, METRICS_TYPE,
                     _event_id(reconciliation_id, figures["source"], figures["window_start"], figures["revision"]),
                     f"{figures['source']}/{data['window_start']}", figures["window_start"], tenant, data)


__all__ = ["FOUND_TYPE", "METRICS_TYPE", "MISSING_TYPE", "SOURCE_PREFIX", "completeness", "id_event", "iso",
           "metrics_event"]
