"""The rules job's running counters, per rule and for the whole job, and how one
micro-batch's reports add to them.

The query thread adds, the terminal view and Prometheus scrapes read
(``wayline.rules.metrics``): every change goes through one method, under the lock.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import orjson

from wayline.rules.engine import ActiveRule

# The kinds of row the rules query's output carries (``wayline.pipelines.rules_plan``).
EVENT, EMIT, FAILURE, METRICS = "event", "emit", "failure", "metrics"


class Report(NamedTuple):
    """One row of a micro-batch's small output: a rule's failure or its metrics."""

    kind: str
    rule: str | None
    value: str | None
    count: int


@dataclass
class RuleCounters:
    name: str
    input: int = 0
    matches: int = 0
    micros: int = 0
    state: int = 0
    late: int = 0
    quarantined: int = 0


@dataclass
class JobCounters:
    batches: int = 0
    events: int = 0
    restarts: int = 0
    reloads: int = 0
    rules: dict[str, RuleCounters] = field(default_factory=dict)
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def rule(self, active: ActiveRule) -> RuleCounters:
        counters = self.rules.get(active.id)
        if counters is None:
            counters = self.rules[active.id] = RuleCounters(active.name)
        return counters

    def account(self, count: int, per_rule: Mapping[str, int], reports: Sequence[Report],
                failed: Mapping[str, str], by_key: Mapping[str, ActiveRule]) -> None:
        """One micro-batch of ``count`` events: the filters' matches (``per_rule``), the
        stateful rules' reports; a failed rule's matches were dropped, so they do not count."""
        with self._lock:
            self.batches += 1
            self.events += count
            for rule in by_key.values():
                rule_counters = self.rule(rule)
                if not rule.compiled.in_processor:  # filters, and the windows the JVM runs
                    rule_counters.input += count
                    rule_counters.matches += per_rule.get(rule.state_key, 0)
            state: dict[str, int] = defaultdict(int)
            for report in reports:
                rule = by_key.get(report.rule or "")
                if report.kind != METRICS:
                    continue
                metrics = orjson.loads(report.value or "{}")
                state[report.rule or ""] += metrics["state"]
                if rule is None:
                    continue
                rule_counters = self.rule(rule)
                rule_counters.input += metrics["rows"]
                rule_counters.micros += metrics["micros"]
                rule_counters.late += metrics["late"]
                if report.rule not in failed:
                    rule_counters.matches += report.count
            for state_key, entries in state.items():
                if state_key in by_key:
                    self.rule(by_key[state_key]).state = entries

    def quarantine(self, rule: ActiveRule, error: str) -> None:
        with self._lock:
            self.rule(rule).quarantined += 1
            self.quarantined.append((rule.name, error))

    def restarted(self) -> None:
        with self._lock:
            self.restarts += 1

    def reloaded(self) -> None:
        with self._lock:
            self.reloads += 1


__all__ = ["EMIT", "EVENT", "FAILURE", "METRICS", "JobCounters", "Report", "RuleCounters"]
