"""Rich renderings for the terminal: tables of addresses and live pipeline counts."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from wayline.pipelines.inspect import InspectCounts
from wayline.stack.local import StackState


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
    return Group(summary, types, reasons)


__all__ = ["inspect_view", "stack_table"]
