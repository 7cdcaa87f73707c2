"""`wayline recon …` (reconciliations, through the same service as the admin API, and their
status) and `wayline run recon` (the recon job with a live view)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer
from rich.console import RenderableType
from rich.table import Table

from wayline import compose
from wayline.cli.output import console, guarded, job_log_file, watch
from wayline.cli.registry import Limit, registry, show
from wayline.core.progress import Collectors
from wayline.core.settings import Settings
from wayline.recon import reconciliation
from wayline.recon.events import iso
from wayline.registry.access import ADMIN
from wayline.stack.logs import job_log

recon_app = typer.Typer(no_args_is_help=True, help="Reconciliations: prove every audited id arrived.")
COLUMNS = ("id", "name", "output_topic", "enabled", "revision")
Seconds = Annotated[float, typer.Option(min=0.001)]


def _side(role: str, topics: list[str] | None, pattern: str | None, id_: str, source: str,
          time: str) -> reconciliation.SideIn:
    return reconciliation.SideIn(role=role, topics=topics or [], pattern=pattern, id=id_, source=source, time=time)


def _outputs() -> reconciliation.OutputTopics:
    return reconciliation.OutputTopics.from_settings(Settings())


def _periods(o: float, n: float, m: float, z: float) -> reconciliation.PeriodsIn:
    return reconciliation.PeriodsIn(o=timedelta(seconds=o), n=timedelta(seconds=n), m=timedelta(seconds=m),
                                    z=timedelta(seconds=z))


@recon_app.command("create")
@guarded
def create_reconciliation(
    name: str,
    expected_topic: Annotated[list[str] | None, typer.Option(help="an audit topic; repeat")] = None,
    expected_pattern: Annotated[str | None, typer.Option(help="or a regex over topic names")] = None,
    expected_role: Annotated[str, typer.Option(help="producer-expected or consumer-expected")] = "producer-expected",
    expected_id: Annotated[str, typer.Option(help="a CloudEvents attribute or data.* path")] = "id",
    expected_source: Annotated[str, typer.Option()] = "source",
    expected_time: Annotated[str, typer.Option()] = "time",
    actual_topic: Annotated[list[str] | None, typer.Option(help="an event topic; repeat")] = None,
    actual_pattern: Annotated[str | None, typer.Option(help="or a regex over topic names")] = None,
    actual_id: Annotated[str, typer.Option()] = "id",
    actual_source: Annotated[str, typer.Option()] = "source",
    actual_time: Annotated[str, typer.Option()] = "time",
    o: Annotated[float, typer.Option("--o", help="metrics interval, s")] = 60,
    n: Annotated[float, typer.Option("--n", help="missing after (and out-of-orderness allowed), s")] = 30,
    m: Annotated[float, typer.Option("--m", help="correction window (and state retention), s")] = 3600,
    z: Annotated[float, typer.Option("--z", help="processing time a stalled watermark waits, s")] = 300,
    output_topic: Annotated[str | None, typer.Option(help="default: recon.output_topic")] = None,
) -> None:
    """Create a reconciliation; a running job picks it up (it restarts on its checkpoint)."""
    body = reconciliation.ReconciliationIn(
        name=name,
        expected=_side(expected_role, expected_topic, expected_pattern, expected_id, expected_source, expected_time),
        actual=_side("actual", actual_topic, actual_pattern, actual_id, actual_source, actual_time),
        periods=_periods(o, n, m, z), output_topic=output_topic,
    )
    with registry() as (session, _):
        created = reconciliation.create(session, ADMIN, body, _outputs())
    show([created], COLUMNS, "reconciliation created")


@recon_app.command("list")
@guarded
def list_reconciliations(limit: Limit = 100) -> None:
    with registry() as (session, _):
        show(reconciliation.list_(session, ADMIN, None, limit, 10_000), COLUMNS, "reconciliations")


@recon_app.command("periods")
@guarded
def change_periods(reconciliation_id: str, o: Annotated[float, typer.Option("--o")],
                   n: Annotated[float, typer.Option("--n")], m: Annotated[float, typer.Option("--m")],
                   z: Annotated[float, typer.Option("--z")]) -> None:
    """Change the periods (seconds); kept state takes them at once."""
    with registry() as (session, _):
        changed = reconciliation.update(session, ADMIN, reconciliation_id,
                                        reconciliation.ReconciliationPatch(periods=_periods(o, n, m, z)), _outputs())
    show([changed], COLUMNS, "periods changed")


@recon_app.command("enable")
@guarded
def enable_reconciliation(reconciliation_id: str) -> None:
    with registry() as (session, _):
        show([reconciliation.update(session, ADMIN, reconciliation_id,
                                    reconciliation.ReconciliationPatch(enabled=True), _outputs())], COLUMNS, "enabled")


@recon_app.command("disable")
@guarded
def disable_reconciliation(reconciliation_id: str) -> None:
    """Stop reconciling (its state is dropped)."""
    with registry() as (session, _):
        show([reconciliation.update(session, ADMIN, reconciliation_id,
                                    reconciliation.ReconciliationPatch(enabled=False), _outputs())], COLUMNS, "disabled")


@recon_app.command("delete")
@guarded
def delete_reconciliation(reconciliation_id: str) -> None:
    with registry() as (session, _):
        reconciliation.delete(session, ADMIN, reconciliation_id)
    console.print(f"reconciliation {reconciliation_id} deleted")


@recon_app.command("status")
@guarded
def recon_status(
    reconciliation_id: str,
    windows: Annotated[int, typer.Option(help="newest windows to show")] = 10,
    missing: Annotated[int, typer.Option(help="missing ids to show")] = 20,
) -> None:
    """Completeness per source and window, the watermark, and the ids missing now."""
    from wayline.recon import store

    with registry() as (session, _):
        found = reconciliation.get(session, ADMIN, reconciliation_id)
        mark = store.watermark(session, reconciliation_id)
        shown = [store.window_out(w) for w in store.windows(session, reconciliation_id, windows)]
        count = store.missing_count(session, reconciliation_id)
        ids = store.missing_ids(session, reconciliation_id, None, missing, 10_000).data
    table = Table(title=f"{found.name}: watermark {iso(mark) if mark is not None else 'none yet'}, "
                        f"{count} missing now")
    names = ("source", "window_start", "expected", "matched", "missing", "found", "duplicates", "late", "too_late",
             "unreadable", "completeness", "revision")
    for column in names:
        table.add_column(column)
    for window in shown:
        values = window.model_dump()
        table.add_row(*(str(values[column]) for column in names))
    console.print(table)
    for row in ids:
        console.print(f"  missing {row['id']} ({row['source']}, {row['expected_time'].isoformat()})")


def self_audit_view(settings: Settings, windows: int = 5) -> RenderableType:
    """The delivery self-audit's newest windows: did every consumed record reach exactly one outcome?"""
    from wayline.recon import self_audit, store

    with compose.database(settings) as database, database.transaction() as session:
        recon_id = self_audit.find(session)
        if recon_id is None:
            return "delivery self-audit: not set up (`wayline run recon` or `make demo` sets it up)"
        shown = store.windows(session, recon_id, windows)
        count = store.missing_count(session, recon_id)
    table = Table(title=f"delivery self-audit ({self_audit.NAME}): {count} records without an outcome now")
    for column in ("topic", "window_start", "consumed", "outcomes", "completeness", "duplicates", "revision"):
        table.add_column(column)
    for window in shown:
        table.add_row(window.source, iso(window.window_start), str(window.counts.expected),
                      str(window.counts.matched), f"{window.completeness:g} %", str(window.counts.duplicates),
                      str(window.revision) if window.revision else "open")
    return table


def watch_recon(settings: Settings) -> None:
    """Run the recon job with a live view and Prometheus gauges until Ctrl-C."""
    from wayline.recon.metrics import ReconMetrics

    with job_log(job_log_file(settings, "recon")):
        with compose.wired(settings, console.status("starting Spark…")) as wiring:
            job = compose.recon_job(wiring)
            with compose.metrics_served(Collectors(ReconMetrics(wiring.database), compose.job_progress(job)),
                                        settings.recon.metrics_host,
                                        settings.recon.metrics_port, "WAYLINE_RECON__METRICS_PORT") as server:
                console.print(f"reconciling {len(job.recon_set.specs)} reconciliations; metrics at {server.where}; "
                              "Ctrl-C stops")

                def view() -> str:
                    seen = job.counters
                    return (f"{seen.batches:,} micro-batches · {seen.missing:,} missing · {seen.found:,} found · "
                            f"{seen.published:,} windows published · {seen.restarts} restarts")

                watch(job, view, "recon job")


__all__ = ["recon_app", "self_audit_view", "watch_recon"]
