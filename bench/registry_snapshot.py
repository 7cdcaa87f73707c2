"""Benchmark: building the registry snapshot, and matching events against it in Spark.

A registry of 10,000 endpoints and 50,000 subscriptions over the load generator's 500
event types and 30,000 tenants (1% whole-type, 79% tenant-list, 20% sub-tenant
subscriptions; 10% with one of 50 content filters). Whole-type subscriptions dominate
the pairs per event: at 1% (500 of them) an event matches about 2 subscriptions. Reports
- the time to build the snapshot from PostgreSQL (target: under 2 s);
- in Spark, over the same cached parsed events: the rate of a plain pass over them (the
  baseline, measured in the same run) and the rate of matching them against the
  snapshot (target: matching is not the bottleneck at 50,000 events/s).

Run: .venv/bin/python bench/registry_snapshot.py [--events 400000] [--runs 5]
It starts its own stack under bench/results/state and stops it at the end.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from sqlalchemy import insert

from toolkit import cli
from toolkit.results import RESULTS, record_results
from toolkit.stack import fresh_stack
from wayline.core.kafka import ensure_topics
from wayline.core.secret import Secret
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.ids import new_id
from wayline.registry.models import Customer, Endpoint, EventType, SigningSecret, Subscription, Tenant
from wayline.registry.secrets import SecretBox
from wayline.registry.snapshot import load_snapshot
from wayline.stack import loadgen

FILTERS = (
    [{"data.amount": {"$gte": float(threshold)}} for threshold in range(0, 1000, 50)]
    + [{"data.currency": {"$in": list(pair)}} for pair in (("EUR", "USD"), ("GBP",), ("JPY", "CHF"), ("EUR",), ("USD",))]
    + [{"data.status": status} for status in loadgen.STATUSES]
    + [{"$and": [{"data.region": region}, {"data.amount": {"$lt": 500.0}}]} for region in loadgen.REGIONS]
    + [{"subject": {"$prefix": f"{entity}/"}} for entity in loadgen.ENTITIES]
    + [{"data.user.tier": {"$gte": tier}} for tier in (1, 2, 3)]
    + [{"$or": [{"data.status": "error"}, {"data.amount": {"$gt": 900.0}}]} for _ in range(7)]
)


def seed_registry(database: Database, box: SecretBox, rng: random.Random, n_endpoints: int, n_subscriptions: int) -> None:
    types = [t.name for t in loadgen.catalog()]
    tenants = [loadgen.tenant_id(i) for i in range(30_000)]
    with_departments = [i for i in range(30_000) if loadgen.subtenants_of(i)]
    customers = [new_id("customer") for _ in range(n_endpoints // 5)]
    endpoints = [new_id("endpoint") for _ in range(n_endpoints)]
    with database.transaction() as s:
        s.execute(insert(EventType), [{"name": name} for name in types])
        s.execute(insert(Tenant), [{"id": loadgen.tenant_id(i), "subtenants": list(loadgen.subtenants_of(i))}
                                   for i in range(30_000)])
        s.execute(insert(Customer), [{"id": c, "name": c} for c in customers])
        s.execute(insert(Endpoint), [
            {"id": e, "customer_id": customers[i % len(customers)], "url": f"http://127.0.0.1:9/{e}",
             "timeout_ms": 5000, "max_in_flight": 16} for i, e in enumerate(endpoints)
        ])
        s.execute(insert(SigningSecret), [
            {"id": new_id("secret"), "endpoint_id": e, "secret_encrypted": box.seal(Secret.generate().text.encode())}
            for e in endpoints
        ])
        rows = []
        for _ in range(n_subscriptions):
            endpoint = rng.randrange(n_endpoints)
            kind = rng.random()
            row = {
                "id": new_id("subscription"), "endpoint_id": endpoints[endpoint],
                "customer_id": customers[endpoint % len(customers)], "tenants": [], "subtenants": [],
                "event_types": rng.sample(types, 1 if rng.random() < 0.6 else rng.randint(2, 3)),
                "filter": rng.choice(FILTERS) if rng.random() < 0.1 else None,
                "mode": "batch" if rng.random() < 0.3 else "streaming",
            }
            if row["mode"] == "batch":
                row.update(max_count=1000, max_wait_ms=1000)
            if kind < 0.01:
                row["tenant_scope"] = "all"
            elif kind < 0.80:
                size = 1 if rng.random() < 0.7 else (rng.randint(2, 10) if rng.random() < 0.83 else rng.randint(11, 100))
                row.update(tenant_scope="tenants", tenants=rng.sample(tenants, size))
            else:
                picks = rng.sample(with_departments, rng.randint(1, 3))
                row.update(tenant_scope="subtenants",
                           subtenants=[[loadgen.tenant_id(i), rng.choice(loadgen.DEPARTMENTS)] for i in picks])
            rows.append(row)
        s.execute(insert(Subscription), rows)


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = cli.parser(__doc__, runs=5)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--endpoints", type=int, default=10_000)
    parser.add_argument("--subscriptions", type=int, default=50_000)
    args = parser.parse_args()

    report: dict[str, object] = {"events": args.events, "runs": args.runs}
    with fresh_stack(RESULTS / "state-registry") as (settings, database):
        bootstrap = settings.kafka_bootstrap()
        service = EndpointService.from_settings(settings)
        seed_seconds = timed(lambda: seed_registry(database, SecretBox.from_settings(settings), random.Random(3),
                                                   args.endpoints, args.subscriptions))
        report["seed_s"] = round(seed_seconds, 2)

        builds, snapshot = [], None
        for _ in range(args.runs):
            with database.transaction() as session:
                started = time.perf_counter()
                snapshot = load_snapshot(session, service)
                builds.append(time.perf_counter() - started)
        assert snapshot is not None
        keys = list(snapshot.match_keys())
        report.update(
            snapshot_build_s_median=round(statistics.median(builds), 3), snapshot_build_s_runs=[round(b, 3) for b in builds],
            subscriptions=len(snapshot.subscriptions), endpoints=len(snapshot.endpoints),
            match_keys=len(keys), distinct_filters=len(snapshot.filters),
        )
        version_polls = []
        for _ in range(200):
            started = time.perf_counter()
            database.current_version()
            version_polls.append(time.perf_counter() - started)
        report["version_poll_ms_median"] = round(statistics.median(version_polls) * 1000, 3)

        from pyspark.sql import functions as F

        from wayline.delivery.routing_table import publish
        from wayline.pipelines.envelope import parse_events, valid_events
        from wayline.pipelines.matching import match_events, routing
        from wayline.stack.spark import spark_session

        ensure_topics(bootstrap, loadgen.topics(), settings.kafka.topic_partitions)
        loadgen.produce(bootstrap, loadgen.EventFactory(seed=11).records(args.events))
        spark = spark_session(settings)
        raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribePattern", "^events\\..*").option("includeHeaders", "true").load())
        events = valid_events(parse_events(raw, settings.envelope)).cache()
        events.count()
        tables = Path(tempfile.mkdtemp(prefix="wayline-routing-"))
        publish(tables / "filtered", snapshot)
        # Every subscription without its filter: the lookups' cost alone.
        publish(tables / "unfiltered", replace(snapshot, filters={}, subscriptions={
            key: replace(s, filter=None, filter_id=None) for key, s in snapshot.subscriptions.items()}))

        def baseline() -> None:
            events.agg(F.count("id"), F.sum(F.length("tenantid"))).collect()

        pairs_box: list[int] = []

        def matching() -> None:
            pairs_box.append(match_events(events, routing(tables / "filtered")).count())

        def lookups_only() -> None:
            match_events(events, routing(tables / "unfiltered")).count()

        baseline_times = [timed(baseline) for _ in range(args.runs)]
        lookup_times = [timed(lookups_only) for _ in range(args.runs)]
        match_times = [timed(matching) for _ in range(args.runs)]
        report.update(
            baseline_events_per_s=round(args.events / statistics.median(baseline_times)),
            lookups_only_events_per_s=round(args.events / statistics.median(lookup_times)),
            match_events_per_s=round(args.events / statistics.median(match_times)),
            baseline_s_runs=[round(t, 2) for t in baseline_times], lookups_only_s_runs=[round(t, 2) for t in lookup_times],
            match_s_runs=[round(t, 2) for t in match_times], matched_pairs=pairs_box[-1],
        )
        spark.stop()
    record_results("registry_snapshot", report, args.out)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
