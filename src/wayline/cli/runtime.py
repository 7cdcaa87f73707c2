"""`wayline run senders` and `wayline run intake`: the delivery runtime's processes, which
`wayline run delivery` starts beside its Spark driver.

A module and an entry point (``python -m wayline.cli.runtime``) of their own, so that
each process loads what it runs, not the whole command line (the registry's commands and
their database stack, the rules' SQL parser, the messaging client): resident after the
imports, an intake process, which uses no database, takes 45 MB this way against 110
through ``wayline.cli.main``, and a sender process 98 against 113 (docs/benchmarks.md,
"Delivery's resident memory (issue 25)"). `wayline run senders` and `wayline run intake` are these
same commands.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Annotated

import typer

from wayline.cli.output import console, guarded
from wayline.core.settings import Settings

runtime_app = typer.Typer(no_args_is_help=True, add_completion=False, help="The delivery runtime's processes.")

_PARENT_HELP = ("stop, as on SIGTERM, once the process with this pid is no longer this one's parent "
                "(`wayline run delivery` passes its own, so the processes it starts never outlive it, even after "
                "kill -9)")


def _runtime_process(parent: int | None) -> threading.Event:
    """For a delivery runtime process (a sender or intake process): the event SIGINT,
    SIGTERM or the loss of ``parent`` sets, and its log on standard error."""
    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        # What is in progress finishes, is recorded and committed; then the process exits.
        signal.signal(number, lambda *_: stop.set())
    if parent is not None:
        def orphaned() -> None:
            while not stop.wait(1.0):
                if os.getppid() != parent:
                    stop.set()

        threading.Thread(target=orphaned, name="wayline-parent", daemon=True).start()
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("wayline").addHandler(handler)
    logging.getLogger("wayline").setLevel(logging.INFO)
    return stop


@runtime_app.command("senders")
@guarded
def run_senders(parent: Annotated[int | None, typer.Option(help=_PARENT_HELP)] = None) -> None:
    """Send what the matching query routed to the work topic (delivery.engine = "senders"): one sender process,
    until SIGINT or SIGTERM; metrics on /metrics (delivery.sender_metrics_port)."""
    # Here, not at the top: the database stack compose loads is the sender's, not the intake's.
    from wayline import compose
    from wayline.delivery.metrics import DeliveryMetrics
    from wayline.delivery.runtime.senders import run_sender

    settings = Settings()
    stop = _runtime_process(parent)
    metrics = DeliveryMetrics()
    pid = os.getpid()
    with (compose.metrics_served(metrics, settings.delivery.metrics_host, settings.delivery.sender_metrics_port,
                                 "WAYLINE_DELIVERY__SENDER_METRICS_PORT") as server,
          compose.database(settings) as database):
        console.print(f"sender {pid}: sending from {settings.delivery.work_topic} as {settings.delivery.sender_group}; "
                      f"metrics at {server.where}; SIGINT or SIGTERM stops", soft_wrap=True)
        run_sender(settings, database, metrics, stop)
    console.print(f"sender {pid}: stopped")


@runtime_app.command("intake")
@guarded
def run_intake(parent: Annotated[int | None, typer.Option(help=_PARENT_HELP)] = None) -> None:
    """Copy the delivery job's source topics onto delivery.intake_topic for the matching query (delivery.intake):
    one intake process, until SIGINT or SIGTERM."""
    from wayline.core.topics import delivered_topic_pattern
    from wayline.delivery.runtime import intake

    settings = Settings()
    stop = _runtime_process(parent)
    pid = os.getpid()
    console.print(f"intake {pid}: copying {delivered_topic_pattern(settings)} onto {settings.delivery.intake_topic} "
                  f"as {settings.delivery.intake_group}; SIGINT or SIGTERM stops", soft_wrap=True)
    intake.run_intake(settings, stop)
    console.print(f"intake {pid}: stopped")


__all__ = ["run_intake", "run_senders", "runtime_app"]

if __name__ == "__main__":
    runtime_app()
