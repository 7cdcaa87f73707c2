"""`wayline cluster up / down / status`: the local Spark standalone cluster."""

from __future__ import annotations

import typer
from rich.table import Table

from wayline.cli.output import console, guarded
from wayline.core.settings import Settings
from wayline.stack import cluster

cluster_app = typer.Typer(no_args_is_help=True, help="A Spark standalone cluster on 127.0.0.1, to run jobs on.")


def cluster_table(state: cluster.ClusterState) -> Table:
    table = Table(title=f"Spark standalone cluster at {state.master_url}")
    for column in ("process", "pid", "running"):
        table.add_column(column)
    pids = [state.master_pid, *state.worker_pids]
    for (name, alive), pid in zip(state.alive.items(), pids, strict=True):
        table.add_row(name, str(pid), "yes" if alive else "NO")
    table.caption = f"master UI {state.master_ui}; run a job on it: WAYLINE_SPARK__MASTER={state.master_url}"
    return table


@cluster_app.command("up")
@guarded
def up() -> None:
    """Start a master and `cluster.workers` workers (each `cluster.worker_cores` cores)."""
    with console.status("starting the Spark master and workers…"):
        state = cluster.up(Settings())
    console.print(cluster_table(state))


@cluster_app.command("down")
@guarded
def down() -> None:
    """Stop the workers, their executors and the master."""
    cluster.down(Settings())
    console.print("cluster stopped")


@cluster_app.command("status")
@guarded
def status() -> None:
    """Show the cluster's processes; exits 1 when none runs or one is down."""
    state = cluster.read_state(Settings())
    if state is None:
        console.print("no local cluster: run `wayline cluster up`")
        raise typer.Exit(1)
    console.print(cluster_table(state))
    if not all(state.alive.values()):
        raise typer.Exit(1)
    workers = state.overview()
    console.print(f"{workers['aliveworkers']} workers registered, {workers['cores']} cores, "
                  f"{len(workers['activeapps'])} applications running")


__all__ = ["cluster_app", "cluster_table"]
