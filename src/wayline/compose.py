"""Wiring: what a command or a service puts together before it runs — the registry
database, a SparkSession, a metrics endpoint, a job — and takes apart after, in one place.

The ``wayline`` commands and the admin API's process use these; the pieces themselves
know nothing of each other. Spark and the pipelines load only when a function here
starts a job, so a process that never does (the admin API, the registry commands) never
imports them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.registry import Collector

from wayline.core.metrics import MetricsServer, serve_metrics
from wayline.core.progress import QueryProgress
from wayline.core.settings import Settings
from wayline.registry.db import Database, make_engine
from wayline.registry.endpoint import EndpointService

if TYPE_CHECKING:
    from fastapi import FastAPI
    from pyspark.sql import SparkSession

    from wayline.delivery.metrics import DeliveryMetrics
    from wayline.delivery.runtime.retries import RunningRetries
    from wayline.pipelines.delivery import DeliveryJob
    from wayline.pipelines.matching_job import MatchingJob
    from wayline.pipelines.recon_job import ReconJob
    from wayline.pipelines.rules_job import RulesJob
    from wayline.registry.rule_control import ControlTopic


@contextmanager
def database(settings: Settings) -> Iterator[Database]:
    """The registry database of ``settings``; its connections are closed on the way out."""
    engine = make_engine(settings.postgres_dsn())
    try:
        yield Database(engine)
    finally:
        engine.dispose()


@contextmanager
def metrics_served(collector: Collector, host: str, port: int, port_setting: str) -> Iterator[MetricsServer]:
    server = serve_metrics(collector, host, port, port_setting)
    try:
        yield server
    finally:
        server.close()


@dataclass(frozen=True)
class Wired:
    """What every job runs on."""

    settings: Settings
    database: Database
    spark: SparkSession

    def endpoints(self) -> EndpointService:
        return EndpointService.from_settings(self.settings)


@contextmanager
def wired(settings: Settings, starting_spark: AbstractContextManager[object] = nullcontext()) -> Iterator[Wired]:
    """The registry database and a SparkSession (started inside ``starting_spark``, a
    progress display), both stopped on the way out."""
    from wayline.stack.spark import spark_session

    with database(settings) as registry:
        with starting_spark:
            spark = spark_session(settings)
        try:
            yield Wired(settings, registry, spark)
        finally:
            spark.stop()


def delivery_job(wiring: Wired, metrics: DeliveryMetrics) -> DeliveryJob:
    from wayline.pipelines.delivery import start_delivery

    return start_delivery(wiring.spark, wiring.settings, wiring.database, wiring.endpoints(), metrics)


def matching_job(wiring: Wired, metrics: DeliveryMetrics) -> MatchingJob:
    """With ``delivery.engine = "senders"``: the Spark side of the delivery job, the
    JVM-only matching query writing requests to ``delivery.work_topic`` (and the batching
    query beside it); the sender processes are started apart."""
    from wayline.pipelines.matching_job import MatchingJob

    return MatchingJob(wiring.spark, wiring.settings, wiring.database, wiring.endpoints(), metrics,
                       wiring.settings.checkpoint_root / "delivery").start()


def retry_drain(settings: Settings, registry: Database, metrics: DeliveryMetrics) -> RunningRetries:
    """The retry drain on a thread of this process (no Spark: `wayline run retries` starts none)."""
    from wayline.delivery.runtime.retries import start_retries

    return start_retries(settings, registry, EndpointService.from_settings(settings), metrics)


def rules_job(wiring: Wired, control: ControlTopic) -> RulesJob:
    from wayline.pipelines.rules_job import RulesJob

    return RulesJob(wiring.spark, wiring.settings, wiring.database, wiring.settings.checkpoint_root / "rules",
                    control).start()


def recon_job(wiring: Wired) -> ReconJob:
    """The recon job over every enabled reconciliation, the delivery self-audit among them."""
    from wayline.pipelines.recon_job import ReconJob
    from wayline.recon import self_audit

    self_audit.ensure(wiring.database, wiring.settings)
    return ReconJob(wiring.spark, wiring.settings, wiring.database, wiring.settings.checkpoint_root / "recon").start()


def job_progress(job: RulesJob | ReconJob) -> QueryProgress:
    """The progress gauges of a job that restarts its query: whichever query runs now."""
    progress = QueryProgress()
    progress.watch(lambda: [query for query in (job.query,) if query is not None])
    return progress


def admin_app(settings: Settings) -> FastAPI:
    """The admin API over the registry of ``settings``, with the web console under /console."""
    from wayline.api.app import create_app
    from wayline.console.app import install

    return install(create_app(settings, Database(make_engine(settings.postgres_dsn()))))


__all__ = [
    "Wired", "admin_app", "database", "delivery_job", "job_progress", "matching_job", "metrics_served", "recon_job", "retry_drain", "rules_job",
    "wired",
]
