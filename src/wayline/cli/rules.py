"""`wayline rules …` (the rule registry, through the same service as the admin API) and
`wayline run rules` (the rules job with a live per-rule view)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.table import Table

from wayline import compose
from wayline.cli.output import console, guarded, job_log_file, watch
from wayline.cli.registry import Limit, registry, show
from wayline.core.progress import Collectors
from wayline.core.settings import Settings
from wayline.registry import reference, rule
from wayline.registry.access import ADMIN
from wayline.stack.logs import job_log

rules_app = typer.Typer(no_args_is_help=True, help="Rules: SQL filters, window aggregations and MATCH_RECOGNIZE patterns.")
COLUMNS = ("id", "name", "kind", "partition_key", "output_topic", "status", "revision", "error")
reference_app = typer.Typer(no_args_is_help=True, help="Reference tables join rules look events up in.")
rules_app.add_typer(reference_app, name="reference")


def _sql(sql: str) -> str:
    """``@file.sql`` reads the rule from a file."""
    return Path(sql[1:]).read_text() if sql.startswith("@") else sql


@rules_app.command("create")
@guarded
def create_rule(
    name: str,
    sql: Annotated[str, typer.Option(help="the rule, or @file.sql")],
    output_topic: Annotated[str, typer.Option("--output-topic")],
    output_type: Annotated[str, typer.Option("--output-type")],
    partition_key: Annotated[list[str] | None, typer.Option("--partition-key", help="a column; repeat")] = None,
    state_budget: Annotated[int | None, typer.Option(help="state entries per partition key")] = None,
    time_budget_ms: Annotated[int | None, typer.Option(help="evaluation time per micro-batch")] = None,
) -> None:
    """Check a rule and deploy it; a running job picks it up between micro-batches."""
    body = rule.RuleIn(name=name, sql=_sql(sql), output_topic=output_topic, output_type=output_type,
                       partition_key=partition_key or None, state_budget=state_budget, time_budget_ms=time_budget_ms)
    with registry() as (session, _):
        created = rule.create(session, ADMIN, body, _policy())
    show([created], COLUMNS, "rule created")


@rules_app.command("list")
@guarded
def list_rules(limit: Limit = 100) -> None:
    with registry() as (session, _):
        show(rule.list_(session, ADMIN, None, limit, 10_000), COLUMNS, "rules")


@rules_app.command("show")
@guarded
def show_rule(rule_id: str) -> None:
    with registry() as (session, _):
        found = rule.get(session, ADMIN, rule_id)
    show([found], COLUMNS, found.name)
    console.print(found.sql)


@rules_app.command("update")
@guarded
def update_rule(rule_id: str, sql: Annotated[str | None, typer.Option(help="the rule, or @file.sql")] = None) -> None:
    """Change a rule's SQL (it restarts with fresh state)."""
    with registry() as (session, _):
        changed = rule.update(session, ADMIN, rule_id, rule.RulePatch(sql=_sql(sql) if sql else None), _policy())
    show([changed], COLUMNS, "rule changed")


@rules_app.command("enable")
@guarded
def enable_rule(rule_id: str) -> None:
    """Run a stopped or quarantined rule again, with fresh state."""
    with registry() as (session, _):
        show([rule.update(session, ADMIN, rule_id, rule.RulePatch(enabled=True), _policy())], COLUMNS, "rule enabled")


@rules_app.command("disable")
@guarded
def disable_rule(rule_id: str) -> None:
    with registry() as (session, _):
        show([rule.update(session, ADMIN, rule_id, rule.RulePatch(enabled=False), _policy())], COLUMNS, "rule disabled")


@rules_app.command("delete")
@guarded
def delete_rule(rule_id: str) -> None:
    with registry() as (session, _):
        rule.delete(session, ADMIN, rule_id)
    console.print(f"rule {rule_id} deleted")


def _view(job) -> Table:
    table = Table(title=f"rules: {job.counters.batches} micro-batches, {job.counters.events} events, "
                        f"{job.counters.restarts} restarts")
    for column in ("rule", "input", "matches", "eval ms", "state", "late", "quarantined"):
        table.add_column(column)
    for counters in list(job.counters.rules.values()):
        table.add_row(counters.name, str(counters.input), str(counters.matches), str(counters.micros // 1000),
                      str(counters.state), str(counters.late), str(counters.quarantined))
    return table


def _policy() -> rule.RulePolicy:
    return rule.RulePolicy.from_settings(Settings())


@reference_app.command("create")
@guarded
def create_reference(name: str, description: str = "") -> None:
    """Create a reference table; rules read it as reference.NAME."""
    with registry() as (session, _):
        created = reference.create_table(session, ADMIN, reference.ReferenceTableIn(name=name, description=description))
    show([created], ("name", "description", "version"), "reference table created")


@reference_app.command("load")
@guarded
def load_reference(name: str, rows: Annotated[Path, typer.Argument(help='JSON lines: {"key": ..., "data": {...}}')]
                   ) -> None:
    """Put every row of a JSON-lines file into a reference table, in one transaction: running
    join rules see the whole load at once, within seconds."""
    count = 0
    with registry() as (session, _), rows.open("rb") as lines:
        chunk: list[reference.ReferenceRowIn] = []
        for line in lines:
            if line.strip():
                chunk.append(reference.ReferenceRowIn.model_validate(orjson.loads(line)))
            if len(chunk) == reference.MAX_ROWS_PER_PUT:
                count += reference.put_rows(session, ADMIN, name, chunk)
                chunk = []
        count += reference.put_rows(session, ADMIN, name, chunk)
        table = reference.get_table(session, ADMIN, name)
    console.print(f"{count:,} rows put into reference table {name}; now at version {table.version}")


def watch_rules(settings: Settings) -> None:
    """Run the rules job with a live per-rule view until Ctrl-C."""
    from wayline.registry.rule_control import ControlTopic
    from wayline.rules.metrics import RulesMetrics

    with job_log(job_log_file(settings, "rules")):
        control = ControlTopic(settings)
        try:
            with compose.wired(settings, console.status("starting Spark…")) as wiring:
                job = compose.rules_job(wiring, control)
                with compose.metrics_served(Collectors(RulesMetrics(job.counters), compose.job_progress(job)),
                                            settings.rules.metrics_host,
                                            settings.rules.metrics_port, "WAYLINE_RULES__METRICS_PORT") as server:
                    console.print(f"running rules; control topic {settings.rules.control_topic}; "
                                  f"metrics at {server.where}; Ctrl-C stops")
                    watch(job, lambda: _view(job), "rules job")
        finally:
            control.close()


__all__ = ["rules_app", "watch_rules"]
