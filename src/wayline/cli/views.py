"""Rich renderings for the terminal: tables of addresses and live pipeline counts."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from wayline.delivery.metrics import Overview
from wayline.delivery.outcomes import Outcome
from wayline.pipelines.inspect import InspectCounts
from wayline.stack.local import StackState
from wayline.stack.receiver import RECENT_S


def stack_table(state: StackState) -> Table:
    alive = state.alive
    table = Table(title="Wayline local stack")
    for column in ("service", "address", "pid", "running"):
        table.add_column(column)
    table.add_row("Kafka", state.kafka_bootstrap, str(state.kafka_pid), "yes" if alive["kafka"] else "NO")
    table.add_row("PostgreSQL", state.postgres_dsn, str(state.postgres_pid), "yes" if alive["postgres"] else "NO")
    return table


def inspect_view(counts: InspectCounts, input_rate: float, processed_rate: float, top: int = 15) -> Group:
    per_type, per_reason, batches = counts.snapshot()
    summary = Table.grid(padding=(0, 2))
    summary.add_row(
        f"[bold]{sum(per_type.values()):,}[/] events",
        f"[bold]{len(per_type)}[/] types",
        f"[bold red]{sum(per_reason.values()):,}[/] quarantined",
        f"{batches} micro-batches",
        f"input {input_rate:,.0f}/s",
        f"processed {processed_rate:,.0f}/s",
    )
    types = Table(title=f"Top {top} event types")
    types.add_column("type")
    types.add_column("events", justify="right")
    for name, count in per_type.most_common(top):
        types.add_row(name, f"{count:,}")
    reasons = Table(title="Quarantine")
    reasons.add_column("reason")
    reasons.add_column("records", justify="right")
    for reason, count in per_reason.most_common():
        reasons.add_row(reason, f"{count:,}")
    if counts.truncated:
        reasons.caption = f"{counts.truncated:,} too large for Kafka: the quarantine copy references the original"
    return Group(summary, types, reasons)


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:,.0f} ms"


def delivery_view(seen: Overview, input_rate: float, endpoints: dict[str, dict[str, Any]]) -> Group:
    """The delivery job's counts beside what each endpoint of the local receiver got."""
    summary = Table.grid(padding=(0, 2))
    summary.add_row(
        f"[bold]{seen.events:,}[/] events",
        f"input {input_rate:,.0f}/s",
        f"[bold green]{seen.deliveries[Outcome.DELIVERED]:,}[/] requests delivered",
        f"{seen.held:,} waited for a batch",
        f"[yellow]{seen.deliveries[Outcome.RETRIED]:,}[/] to retry",
        f"{seen.filtered:,} matched no one",
        f"[red]{seen.quarantined:,}[/] quarantined",
        f"{seen.batches} micro-batches",
    )
    return Group(summary, received_table(endpoints))


def senders_view(progress: dict[str, Any], input_rate: float, endpoints: dict[str, dict[str, Any]],
                 recent: dict[str, dict[str, Any]] | None = None) -> Group:
    """With ``delivery.engine = "senders"``: the matching query's last batch, what the local
    receiver's endpoints got in the last minute (streaming and batch apart), and what each
    got since the start (the sender processes count on their own /metrics)."""
    from wayline.pipelines.matching_job import OBSERVED

    observed = (progress.get("observedMetrics") or {}).get(OBSERVED)
    seen = observed.asDict() if observed is not None else {}  # a pyspark Row
    summary = Table.grid(padding=(0, 2))
    summary.add_row(
        f"input {input_rate:,.0f}/s",
        f"last matching batch: [bold]{int(seen.get('events') or 0):,}[/] events",
        f"{int(seen.get('filtered') or 0):,} matched no one",
        f"[red]{int(seen.get('quarantined') or 0):,}[/] quarantined",
    )
    return Group(summary, *([recent_table(recent)] if recent else []), received_table(endpoints))


def recent_table(recent: dict[str, dict[str, Any]]) -> Table:
    """The receiver's last minute (:meth:`~wayline.stack.receiver.Receiver.recent`), per mode."""
    table = Table(title=f"Last {RECENT_S:g} s at the receiver (event time → arrival)")
    for column in ("endpoints", "events", "latency p50", "latency p99"):
        table.add_column(column, justify="left" if column == "endpoints" else "right")
    for mode, got in recent.items():
        table.add_row(f"{mode} mode", f"{got['events']:,}", _seconds(got["latency_p50_s"]),
                      _seconds(got["latency_p99_s"]))
    return table


def received_table(endpoints: dict[str, dict[str, Any]]) -> Table:
    """What each path of a local receiver got since it started (its ``stats()``)."""
    table = Table(title="What the endpoints received since the start (signatures checked with standardwebhooks)")
    for column in ("endpoint", "requests", "events", "bad signatures", "latency p50", "latency p99"):
        table.add_column(column, justify="left" if column == "endpoint" else "right")
    for path, got in endpoints.items():
        table.add_row(path, f"{got['requests']:,}", f"{got['events']:,}", f"{got['rejected']:,}",
                      _seconds(got["latency_p50_s"]), _seconds(got["latency_p99_s"]))
    return table


__all__ = ["delivery_view", "inspect_view", "recent_table", "received_table", "senders_view", "stack_table"]
