"""The compiled registry snapshot the pipelines match events against.

The pipelines never query the registry per event. They load an immutable snapshot —
an index from event type → tenant → sub-tenant → subscriptions, each subscription's
compiled filter and delivery settings, every endpoint's delivery settings — tagged
with the registry version it was built from, and poll `Database.current_version()`
between micro-batches to swap it when the registry changes.

Wildcards: `*` as tenant matches every tenant (scope `all`); `*` as sub-tenant matches
every sub-tenant of the tenant, and events without one (scope `tenants`).
Only enabled subscriptions of enabled endpoints are in the snapshot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from wayline.registry.catalog import OPERATIONAL_EVENT_TYPES
from wayline.registry.endpoint import EndpointService
from wayline.registry.filter import DEEPEST, Filter, parse_filter
from wayline.registry.models import Endpoint, RegistryVersion

ANY = "*"


@dataclass(frozen=True)
class EndpointTarget:
    id: str
    customer_id: str
    url: str
    auth: Any  # one of wayline.registry.endpoint's auth models, credentials decrypted
    timeout_ms: int
    max_in_flight: int
    rate_limit_per_s: int | None
    secrets: tuple[str, ...]  # every secret that signs now, newest first
    retry_schedule_s: tuple[float, ...] | None = None  # None: the deployment's
    retry_statuses: tuple[int, ...] = ()


@dataclass(frozen=True)
class CompiledSubscription:
    id: str
    endpoint_id: str
    customer_id: str
    mode: str
    max_count: int | None
    max_wait_ms: int | None
    filter: Filter | None
    filter_id: int | None  # equal filters share an id, so the pipeline evaluates each once


MatchKey = tuple[str, str, str]  # (event type, tenant or ANY, sub-tenant or ANY)


@dataclass(frozen=True)
class Snapshot:
    version: int
    built_at: datetime
    subscriptions: Mapping[str, CompiledSubscription]
    endpoints: Mapping[str, EndpointTarget]
    index: Mapping[MatchKey, tuple[str, ...]]
    filters: Mapping[int, Filter] = field(default_factory=dict)

    @staticmethod
    def lookup_keys(event_type: str, tenant: str, subtenant: str | None) -> tuple[MatchKey, ...]:
        """The keys an event is looked up under; the Spark join uses the same three."""
        wider = ((event_type, tenant, ANY), (event_type, ANY, ANY))
        return ((event_type, tenant, subtenant), *wider) if subtenant is not None else wider

    def match(self, event_type: str, tenant: str, subtenant: str | None) -> tuple[str, ...]:
        """Ids of the subscriptions whose scope covers this event (before content filters)."""
        found: list[str] = []
        for key in self.lookup_keys(event_type, tenant, subtenant):
            found += self.index.get(key, ())
        return tuple(sorted(set(found)))

    def match_keys(self) -> Iterator[tuple[str, str, str, str, int | None]]:
        """(event type, tenant key, sub-tenant key, subscription id, filter id) rows: the
        lookup table a pipeline broadcasts and equi-joins events against."""
        for (event_type, tenant_key, subtenant_key), ids in self.index.items():
            for subscription_id in ids:
                yield (event_type, tenant_key, subtenant_key, subscription_id,
                       self.subscriptions[subscription_id].filter_id)


def current_version(session: Session) -> int:
    return int(session.scalar(select(RegistryVersion.version).where(RegistryVersion.id == 1)) or 0)


def load_snapshot(session: Session, endpoints: EndpointService) -> Snapshot:
    """Read the registry in one REPEATABLE READ transaction, so rows and version agree."""
    session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    version = current_version(session)
    now = datetime.now(timezone.utc)

    secrets: dict[str, list[str]] = defaultdict(list)
    for row in endpoints.active_secret_rows(session, None, now):
        secrets[row.endpoint_id].append(endpoints.open_secret(row))
    targets = {
        row.id: EndpointTarget(
            id=row.id, customer_id=row.customer_id, url=row.url, auth=endpoints.auth_of(row),
            timeout_ms=row.timeout_ms, max_in_flight=row.max_in_flight,
            rate_limit_per_s=row.rate_limit_per_s, secrets=tuple(secrets[row.id]),
            retry_schedule_s=tuple(row.retry_schedule_s) if row.retry_schedule_s is not None else None,
            retry_statuses=tuple(row.retry_statuses),
        )
        for row in session.scalars(select(Endpoint).where(Endpoint.enabled.is_(True)))
    }

    filter_ids: dict[bytes, int] = {}
    filters: dict[int, Filter] = {}
    subscriptions: dict[str, CompiledSubscription] = {}
    index: dict[MatchKey, list[str]] = {}
    # The driver's own rows: SQLAlchemy's per-element ARRAY processing was a large part of
    # the build (see docs/benchmarks.md#registry-snapshot-and-matching-issue-3--2026-11-22), and psycopg
    # already returns text[] as lists.
    rows = session.connection().exec_driver_sql(
        "SELECT id, endpoint_id, customer_id, event_types, tenant_scope, tenants, subtenants, filter,"
        " mode, max_count, max_wait_ms FROM subscriptions WHERE enabled"
    )
    for (sub_id, endpoint_id, customer_id, event_types, scope, tenants, subtenants, raw_filter,
         mode, max_count, max_wait_ms) in rows:
        if endpoint_id not in targets:
            continue
        filter_id = None
        if raw_filter is not None:
            canonical = orjson.dumps(raw_filter, option=orjson.OPT_SORT_KEYS)
            filter_id = filter_ids.get(canonical)
            if filter_id is None:
                filter_id = filter_ids[canonical] = len(filter_ids) + 1
                filters[filter_id] = parse_filter(raw_filter, DEEPEST)
        subscriptions[sub_id] = CompiledSubscription(
            id=sub_id, endpoint_id=endpoint_id, customer_id=customer_id, mode=mode, max_count=max_count,
            max_wait_ms=max_wait_ms, filter=filters[filter_id] if filter_id else None, filter_id=filter_id,
        )
        if scope == "all":
            pairs: list[tuple[str, str]] = [(ANY, ANY)]
        elif scope == "tenants":
            pairs = [(tenant, ANY) for tenant in tenants]
        else:
            pairs = [(tenant, subtenant) for tenant, subtenant in subtenants]
        if OPERATIONAL_EVENT_TYPES.issuperset(event_types):
            # Operational events carry their customer as the tenant; a subscription to them
            # is validated to hold nothing else.
            pairs = [(customer_id, ANY)]
        for event_type in event_types:
            for tenant_key, subtenant_key in pairs:
                index.setdefault((event_type, tenant_key, subtenant_key), []).append(sub_id)

    return Snapshot(version=version, built_at=now, subscriptions=subscriptions, endpoints=targets,
                    index={key: tuple(ids) for key, ids in index.items()}, filters=filters)


__all__ = ["ANY", "CompiledSubscription", "EndpointTarget", "MatchKey", "Snapshot", "current_version", "load_snapshot"]
