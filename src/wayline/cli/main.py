"""The `wayline` command: the local stack, the load generator, the registry, the services
and the pipelines."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from wayline import compose
from wayline.cli.cluster import cluster_app
from wayline.cli.messaging import register as register_messaging
from wayline.cli.output import console, guarded, job_log_file, watch
from wayline.cli.recon import recon_app, watch_recon
from wayline.cli.registry import APPS
from wayline.cli.rules import rules_app, watch_rules
from wayline.cli.runtime import run_intake, run_senders
from wayline.core.errors import WaylineError
from wayline.core.kafka import ensure_topics
from wayline.core.progress import Collectors, QueryProgress
from wayline.core.settings import Settings
from wayline.stack import loadgen, local
from wayline.stack.logs import job_log

if TYPE_CHECKING:
    from wayline.stack.receiver import Receiver

app = typer.Typer(no_args_is_help=True, help="Wayline: event streaming on Apache Spark.")
run_app = typer.Typer(no_args_is_help=True, help="Run a pipeline.")
serve_app = typer.Typer(help="Run an HTTP service; alone: the admin and messaging APIs together.")
app.add_typer(run_app, name="run")
app.add_typer(serve_app, name="serve")
for _name, _sub_app in APPS.items():
    app.add_typer(_sub_app, name=_name)
app.add_typer(rules_app, name="rules")
app.add_typer(recon_app, name="recon")
app.add_typer(cluster_app, name="cluster")


@run_app.callback()
def _run_on(
    master: Annotated[str | None, typer.Option(help="Spark master URL (spark://host:port …); default: spark.master")] = None,
) -> None:
    # Every job reads its settings afresh; the environment is the settings' own override.
    if master:
        os.environ["WAYLINE_SPARK__MASTER"] = master


def _start_stack(settings: Settings) -> local.StackState:
    """The stack, with the registry schema migrated: what every other command expects."""
    from wayline.registry.db import migrate

    with console.status("starting Kafka and PostgreSQL…"):
        state = local.up(settings)
        with compose.database(settings) as registry:
            migrate(registry.engine)
    return state


@app.command()
@guarded
def up() -> None:
    """Start the local Kafka broker and PostgreSQL, create topics, migrate the registry."""
    from wayline.cli.views import stack_table

    console.print(stack_table(_start_stack(Settings())))


@app.command()
@guarded
def down() -> None:
    """Stop the local stack started by `wayline up`."""
    local.down(Settings())
    console.print("stack stopped")


@app.command()
@guarded
def status() -> None:
    """Show the local stack's addresses, whether its processes run, and the delivery self-audit."""
    from wayline.cli.recon import self_audit_view
    from wayline.cli.views import stack_table

    state = local.read_state(Settings())
    if state is None:
        console.print("no local stack: run `wayline up`")
        raise typer.Exit(1)
    console.print(stack_table(state))
    if not all(state.alive.values()):
        raise typer.Exit(1)
    console.print(self_audit_view(Settings()))


@app.command()
@guarded
def produce(
    rate: Annotated[float, typer.Option(help="events per second; 0 means as fast as possible")] = 5000,
    count: Annotated[int, typer.Option(help="how many events to send")] = 100_000,
    bad_fraction: Annotated[float, typer.Option(help="share of deliberately broken records")] = 0.0,
    tenants: Annotated[int, typer.Option(help="number of distinct tenants")] = 30_000,
    seed: Annotated[int, typer.Option(help="random seed, for reproducible streams")] = 7,
) -> None:
    """Send realistic CloudEvents over 500 event types and 30,000 tenants."""
    settings = Settings()
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, loadgen.topics(settings.kafka.event_topic_prefix), settings.kafka.topic_partitions)
    factory = loadgen.EventFactory(
        seed=seed, tenants=tenants, topic_prefix=settings.kafka.event_topic_prefix, bad_fraction=bad_fraction
    )
    with Progress(
        TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task("produce", total=count)
        summary = loadgen.produce(
            bootstrap, factory.records(count), rate=rate or None, on_progress=lambda n: progress.advance(task, n),
        )
    console.print(f"sent {summary.sent:,} events in {summary.seconds:.1f} s: {summary.rate:,.0f} events/s")


def _watch_inspect(settings: Settings, stop_when: Callable[[], bool] = lambda: False) -> None:
    from wayline.cli.views import inspect_view
    from wayline.pipelines.inspect import InspectCounts, start_inspect
    from wayline.stack.spark import spark_session

    with job_log(job_log_file(settings, "inspect")):
        with console.status("starting Spark…"):
            spark = spark_session(settings)
        counts = InspectCounts()
        query = start_inspect(spark, settings, counts)

        def view() -> RenderableType:
            progress = query.lastProgress or {}
            return inspect_view(counts, float(progress.get("inputRowsPerSecond") or 0),
                                float(progress.get("processedRowsPerSecond") or 0))

        try:
            watch(query, view, "inspect query", stop_when)
        finally:
            spark.stop()


@run_app.command("inspect")
@guarded
def run_inspect() -> None:
    """Read every event topic and show live counts per type and per quarantine reason (it writes nothing)."""
    _watch_inspect(Settings())


def _start_intake(sending: ExitStack, settings: Settings) -> None:
    """The intake processes, where ``settings`` have the intake on."""
    if settings.delivery.intake != "on":
        return
    from wayline.delivery.runtime.intake import running_intake

    pids = sending.enter_context(running_intake(settings))
    console.print(f"intake processes {', '.join(map(str, pids))} copy the source topics onto "
                  f"{settings.delivery.intake_topic}")


READING_TIMEOUT_S = 120.0
"""How long `wayline run delivery` waits for the matching query to read before it starts the
rest (the retry drain, the self-audit, the demo's producer) anyway."""


def _watch_delivery(settings: Settings, receiver: Receiver | None = None,
                    stop_when: Callable[[], bool] = lambda: False, *, retries: bool = False,
                    self_audit: bool = False, on_running: Callable[[], None] = lambda: None) -> None:
    """Run the delivery job with a live view until Ctrl-C (or ``stop_when``); with a local
    ``receiver``, the view shows what each of its endpoints got. With ``retries``, the retry
    drain runs beside it on a thread of this process (counted in the same metrics); with
    ``self_audit``, the recon job too (every enabled reconciliation, the delivery self-audit
    among them: `wayline status` shows its completeness). With ``delivery.engine =
    "senders"`` the job is the matching query, ``delivery.sender_processes`` sender
    processes send what it routes, and where ``delivery.intake`` is on,
    ``delivery.intake_processes`` intake processes copy the source topics for it.
    ``on_running`` is called once the queries run (with the senders engine, once the
    matching query reads), before the view starts."""
    from wayline.cli.views import delivery_view, senders_view
    from wayline.delivery.metrics import DeliveryMetrics

    senders = settings.delivery.engine == "senders"
    if senders:
        from wayline.pipelines.matching_job import with_enough_slots, with_matching_jvm

        settings = with_enough_slots(with_matching_jvm(settings), beside=int(self_audit))
    metrics = DeliveryMetrics()
    progress = QueryProgress()
    with (compose.metrics_served(Collectors(metrics, progress), settings.delivery.metrics_host,
                                 settings.delivery.metrics_port, "WAYLINE_DELIVERY__METRICS_PORT") as server,
          job_log(job_log_file(settings, "delivery")),
          ExitStack() as sending):
        if senders:
            # Started before Spark: their imports, group joins and the intake's first copies
            # then overlap the JVM's start and the query's first plan, where they waited
            # for both (docs/decisions.md, "The runtime processes start before Spark").
            from wayline.delivery.runtime.senders import running_senders

            _start_intake(sending, settings)
            pids = sending.enter_context(running_senders(settings))
            console.print(f"sender processes {', '.join(map(str, pids))} send from {settings.delivery.work_topic}")
        wiring = sending.enter_context(compose.wired(settings, console.status("starting Spark…")))
        job = compose.matching_job(wiring, metrics) if senders else compose.delivery_job(wiring, metrics)
        if senders:
            if settings.delivery.intake == "auto":
                # Decided by the job on a cluster master, from the cores it got.
                _start_intake(sending, job.settings)
            console.print("the matching query reads " + ("the intake topic" if job.settings.delivery.intake == "on"
                                                          else "the source topics")
                          + f" ({job.settings.delivery.matching_trigger})")
        progress.watch(lambda: job.queries)
        console.print(f"delivering; metrics at {server.where}; Ctrl-C stops")

        def view() -> RenderableType:
            running = job.queries
            progress = (running[0].lastProgress if running else None) or {}
            input_rate = float(progress.get("inputRowsPerSecond") or 0)
            stats = receiver.stats() if receiver else {}
            if senders:
                return senders_view(progress, input_rate, stats, receiver.recent() if receiver else None)
            return delivery_view(metrics.overview(), input_rate, stats)

        if senders:
            with console.status("the matching query plans its first batch…"):
                reading = job.wait_until_reading(READING_TIMEOUT_S)
            if not reading:
                console.print(f"the matching query does not read yet after {READING_TIMEOUT_S:g} s; going on")
        # Started once it reads: their own first plans would slow its first.
        retry_drain = compose.retry_drain(settings, wiring.database, metrics) if retries else None
        recon = compose.recon_job(wiring) if self_audit else None
        on_running()
        try:
            watch(job, view, "delivery job",
                  lambda: stop_when() or (retry_drain is not None and not retry_drain.isActive)
                  or (recon is not None and not recon.isActive))
            from wayline.pipelines.micro_batch import interrupted

            for name, side in (("retry drain", retry_drain), ("recon job", recon)):
                failure = side.exception() if side is not None else None
                # Ctrl-C cancels every Spark job, the other queries' micro-batches too: a stop.
                if failure is not None and not interrupted(failure):
                    raise WaylineError(f"the {name} failed: {failure}")
        finally:
            if retry_drain is not None:
                retry_drain.stop()
            if recon is not None:
                recon.stop()


@run_app.command("delivery")
@guarded
def run_delivery() -> None:
    """Deliver matched events to subscribed endpoints, signed, one by one or in batches; metrics on /metrics."""
    _watch_delivery(Settings())


@run_app.command("rules")
@guarded
def run_rules() -> None:
    """Run every active rule over one read of the event topics; rules change while it runs."""
    watch_rules(Settings())


@run_app.command("recon")
@guarded
def run_recon() -> None:
    """Reconcile every enabled reconciliation: missing and found ids, completeness per window."""
    watch_recon(Settings())


@run_app.command("retries")
@guarded
def run_retries() -> None:
    """Drain the retry store: re-attempt due deliveries, dead-letter the exhausted, disable endpoints failing too long."""
    from wayline.delivery.metrics import DeliveryMetrics
    from wayline.delivery.outcomes import Outcome

    settings = Settings()
    metrics = DeliveryMetrics()
    with (compose.metrics_served(metrics, settings.delivery.metrics_host,
                                 settings.delivery.retry_metrics_port, "WAYLINE_DELIVERY__RETRY_METRICS_PORT") as server,
          job_log(job_log_file(settings, "retries")),
          compose.database(settings) as database):
        drain = compose.retry_drain(settings, database, metrics)
        console.print(f"draining retries every {settings.delivery.retry_poll_s:g} s; metrics at {server.where}; "
                      "Ctrl-C stops")

        def view() -> RenderableType:
            seen = metrics.overview()
            return (f"{seen.deliveries[Outcome.DELIVERED]:,} delivered on retry · "
                    f"{seen.deliveries[Outcome.RETRIED]:,} to retry again · "
                    f"{seen.deliveries[Outcome.DEAD_LETTERED]:,} dead-lettered")

        watch(drain, view, "retry drain")


# The delivery runtime's processes: `wayline run delivery` starts them through their own
# entry point (wayline.cli.runtime), which loads less than this module.
run_app.command("senders")(run_senders)
run_app.command("intake")(run_intake)


@serve_app.command("admin")
@guarded
def serve_admin(
    host: Annotated[str | None, typer.Option(help="default: api.host from the settings")] = None,
    port: Annotated[int | None, typer.Option(help="default: api.port from the settings")] = None,
) -> None:
    """Serve the admin API (OpenAPI at /docs) and the web console (/console). Stateless: run as many as you like."""
    import uvicorn

    settings = Settings()
    uvicorn.run(compose.admin_app(settings), host=host or settings.api.host, port=port or settings.api.port)


def _path_secrets(given: list[str]) -> dict[str, list[str]]:
    secrets: dict[str, list[str]] = {}
    for item in given:
        path, sep, secret = item.partition("=")
        if not sep or not path.startswith("/") or not secret:
            raise typer.BadParameter(f"{item!r}: write PATH=SECRET, e.g. /hooks=whsec_…", param_hint="--secret")
        secrets.setdefault(path, []).append(secret)
    return secrets


@app.command()
@guarded
def receive(
    port: Annotated[int, typer.Option(help="port to listen on, on 127.0.0.1")] = 9000,
    secret: Annotated[list[str] | None, typer.Option(
        help="PATH=SECRET: check requests to PATH against this signing secret (repeatable); without it, "
             "against the secrets of the local registry's endpoints at this receiver's address",
    )] = None,
) -> None:
    """A webhook receiver on 127.0.0.1: checks each request's Standard Webhooks signature and
    shows requests, events, bad signatures and latency per path; Ctrl-C stops."""
    from rich.live import Live

    from wayline.cli.views import received_table
    from wayline.registry.db import Database, make_engine
    from wayline.registry.endpoint import EndpointService
    from wayline.stack.receiver import Receiver, ReceiverServer, registry_secrets

    given = _path_secrets(secret or [])
    settings = Settings()
    engine = None if given else make_engine(settings.postgres_dsn())
    receiver = Receiver(given)
    server = ReceiverServer(receiver, port)
    bases = [server.url, f"http://localhost:{server.port}"]

    def trust_registry() -> None:  # endpoints made or rotated while it runs are trusted too
        if engine is not None:
            receiver.trust(registry_secrets(Database(engine), EndpointService.from_settings(settings), bases))

    live = Live(received_table(receiver.stats()), console=console, refresh_per_second=2)
    try:
        trust_registry()
        console.print(f"receiving on {server.url}/<path>; counts as JSON at {server.url}/stats; Ctrl-C stops",
                      soft_wrap=True)
        live.start()
        try:
            while True:
                for _ in range(10):
                    time.sleep(0.5)
                    live.update(received_table(receiver.stats()))
                trust_registry()
        except KeyboardInterrupt:  # the table left on screen counts every request, even the last
            live.update(received_table(receiver.stats()))
    except KeyboardInterrupt:
        pass
    finally:
        # Stopped here, not by a with-block: a Ctrl-C while it starts (its refresh thread
        # already running, stdout redirected) would skip a with-block's exit.
        live.stop()
        server.close()
        if engine is not None:
            engine.dispose()
    total = receiver.totals()
    console.print(f"received {total.requests:,} requests ({total.events:,} events), "
                  f"{total.rejected:,} with a bad signature")


@app.command()
@guarded
def demo(
    # What the delivery job keeps up with on the 2-core development machine (README, "The two
    # commands"); the delivery fast path (issue 13) is to raise it.
    rate: Annotated[float, typer.Option(help="events per second to produce")] = 300,
    bad_fraction: Annotated[float, typer.Option(help="share of broken records")] = 0.01,
) -> None:
    """Start the stack, seed sample subscriptions, produce a stream and deliver it to a local
    receiver that checks every signature, with the delivery self-audit (recon job) beside it:
    `wayline status` shows its completeness. Ctrl-C stops all."""
    from wayline.registry.endpoint import EndpointService
    from wayline.stack.receiver import Receiver, ReceiverServer
    from wayline.stack.seed import seed

    # The demo's endpoints live on this machine, which endpoint URLs may not name unless
    # allowed: through the environment, which the sender processes read their settings from too.
    allowed = [*Settings().registry.url_allow_list, "127.0.0.1/32"]
    os.environ["WAYLINE_REGISTRY__URL_ALLOW_LIST"] = json.dumps(allowed)
    settings = Settings()
    state = _start_stack(settings)
    console.print(f"Kafka at {state.kafka_bootstrap}, PostgreSQL at {state.postgres_dsn}")
    ensure_topics(state.kafka_bootstrap, loadgen.topics(settings.kafka.event_topic_prefix), settings.kafka.topic_partitions)
    stop = threading.Event()
    failures: list[BaseException] = []

    def feed() -> None:
        factory = loadgen.EventFactory(topic_prefix=settings.kafka.event_topic_prefix, bad_fraction=bad_fraction)
        try:
            loadgen.produce(state.kafka_bootstrap, factory.records(), rate=rate, stop=stop)
        except BaseException as exc:  # surfaced in the main thread below
            failures.append(exc)

    receiver = ReceiverServer(Receiver())
    producer = threading.Thread(target=feed, name="wayline-demo-producer", daemon=True)
    try:
        with compose.database(settings) as registry:
            seeded = seed(registry, EndpointService.from_settings(settings), receiver.url)
        receiver.receiver.trust(seeded.secrets)
        for described in seeded.subscriptions.values():
            console.print(f"  subscription {described}")
        # Events start once the job runs: a backlog built while Spark starts would make the
        # first look at the latencies a look at that backlog.
        _watch_delivery(settings, receiver.receiver, stop_when=lambda: bool(failures), retries=True,
                        self_audit=True, on_running=producer.start)
    finally:
        stop.set()
        if producer.is_alive():
            producer.join(timeout=70)
        receiver.close()
        with console.status("stopping the stack…"):
            local.down(settings)
    if failures:
        raise WaylineError(f"the demo producer failed: {failures[0]}")
    console.print("demo stopped; the stack is down")


register_messaging(app, serve_app)

__all__ = ["app"]

if __name__ == "__main__":
    app()
