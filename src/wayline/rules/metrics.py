"""The rules job's Prometheus metrics: per rule, what went in, what matched, what it cost.

Read from the job's running counters (``wayline.rules.counters.JobCounters``) at scrape
time; the rule's name is a label beside its id, so a dashboard reads the name and a rule
renamed keeps its series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from wayline.rules.counters import JobCounters


class RulesMetrics(Collector):
    def __init__(self, counters: JobCounters) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        job = self._counters
        # A copy in one step: the job's thread adds rules while a scrape runs.
        rules = list(job.rules.items())
        labels = ["rule_id", "rule"]
        families = (
            (CounterMetricFamily("wayline_rule_input_events", "Events a rule evaluated", labels=labels), "input", 1),
            (CounterMetricFamily("wayline_rule_matches", "Output events a rule emitted", labels=labels), "matches", 1),
            (CounterMetricFamily("wayline_rule_evaluation_seconds", "Time spent evaluating a rule", labels=labels),
             "micros", 1e-6),
            (GaugeMetricFamily("wayline_rule_state_entries", "State entries a rule holds", labels=labels), "state", 1),
            (CounterMetricFamily("wayline_rule_late_events", "Events a rule dropped as later than the watermark",
                                 labels=labels), "late", 1),
            (CounterMetricFamily("wayline_rule_quarantines", "Times a rule was quarantined", labels=labels),
             "quarantined", 1),
        )
        for family, field, scale in families:
            for rule_id, counts in rules:
                family.add_metric([rule_id, counts.name], getattr(counts, field) * scale)
            yield family
        yield CounterMetricFamily("wayline_rules_micro_batches", "Micro-batches of the rules query", value=job.batches)
        yield CounterMetricFamily("wayline_rules_events", "Events the rules query read", value=job.events)
        yield CounterMetricFamily("wayline_rules_query_restarts", "Restarts of the rules query for a new partition key",
                                  value=job.restarts)
        yield CounterMetricFamily("wayline_rules_reloads", "Rule-set reloads after a rule changed", value=job.reloads)


__all__ = ["RulesMetrics"]
