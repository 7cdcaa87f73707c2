"""The rules job's counters as Prometheus metrics, scraped over HTTP from 127.0.0.1."""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from wayline.core.metrics import serve_metrics
from wayline.rules.counters import JobCounters, RuleCounters
from wayline.rules.metrics import RulesMetrics


def test_each_rules_counts_are_served_under_its_id_and_name() -> None:
    counters = JobCounters(batches=3, events=120, restarts=1, reloads=2)
    counters.rules["rule_a"] = RuleCounters("big-spenders", input=120, matches=7, micros=2_500_000, state=0)
    counters.rules["rule_b"] = RuleCounters("three-fails", input=40, matches=1, micros=500_000, state=33, late=2,
                                            quarantined=1)
    server = serve_metrics(RulesMetrics(counters), "127.0.0.1", 0, "WAYLINE_RULES__METRICS_PORT")
    try:
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    finally:
        server.close()
    samples = {
        (s.name, s.labels.get("rule_id")): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }
    assert samples[("wayline_rule_input_events_total", "rule_a")] == 120
    assert samples[("wayline_rule_matches_total", "rule_b")] == 1
    assert samples[("wayline_rule_evaluation_seconds_total", "rule_a")] == 2.5
    assert samples[("wayline_rule_state_entries", "rule_b")] == 33
    assert samples[("wayline_rule_late_events_total", "rule_b")] == 2
    assert samples[("wayline_rule_quarantines_total", "rule_b")] == 1
    assert samples[("wayline_rules_micro_batches_total", None)] == 3
    assert samples[("wayline_rules_events_total", None)] == 120
    assert 'rule="three-fails"' in text
