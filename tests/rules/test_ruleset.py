"""The running rules: compiled once per revision, skipped when they no longer compile, and
re-read by a worker only when the rules version moves."""

from __future__ import annotations

from types import SimpleNamespace

from wayline.rules.ruleset import RuleSet, RuleSets, active_rule, rule_set

FILTER = "SELECT id FROM events WHERE type = 'a'"
WINDOW = "SELECT tenantid, COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '1 minute')"


def row(rule_id: str, sql: str, revision: int = 1, partition_key: tuple[str, ...] = ()) -> SimpleNamespace:
    """A rule as the registry stores it (the columns ``active_rule`` reads)."""
    return SimpleNamespace(id=rule_id, revision=revision, name=f"name-{rule_id}", sql=sql,
                           partition_key=list(partition_key), output_topic=f"out.{rule_id}",
                           output_type=f"alert.{rule_id}", state_budget=100, time_budget_ms=1000)


def test_a_revision_is_compiled_once_and_a_new_revision_again() -> None:
    first = active_rule(row("rs_once", FILTER))
    assert active_rule(row("rs_once", FILTER)) is first
    changed = active_rule(row("rs_once", WINDOW, revision=2, partition_key=("tenantid",)))
    assert changed is not first and changed.compiled.stateful and changed.state_key == "rs_once@2"


def test_a_rule_that_no_longer_compiles_is_left_out_and_the_others_run() -> None:
    rules = rule_set(7, [row("rs_good", FILTER), row("rs_bad", "SELECT FROM WHERE"), row("rs_win", WINDOW, partition_key=("tenantid",))])
    assert rules.version == 7
    assert [rule.id for rule in rules.rules] == ["rs_good", "rs_win"]
    assert [rule.id for rule in rules.filters] == ["rs_good"]
    # A tumbling window runs in the JVM's aggregation: no partition key for the Python processor.
    assert rules.key_specs == () and [rule.id for rule in rules.windows] == ["rs_win"]
    assert set(rules.by_state_key()) == {"rs_good@1", "rs_win@1"}


def test_the_python_processor_s_keys_are_those_of_patterns_and_windows_the_jvm_does_not_run() -> None:
    sliding = WINDOW.replace("window(", "sliding_window(")
    pattern = ("SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY data.user ORDER BY event_time MEASURES A.id AS a "
               "PATTERN (A) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.type = 'x')")
    rules = rule_set(1, [row("rs_tumbling", WINDOW, partition_key=("tenantid",)), row("rs_sliding", sliding, partition_key=("tenantid",)),
                         row("rs_pattern", pattern, partition_key=("data.user",))])
    assert rules.key_specs == ("data.user", "tenantid")
    assert [rule.id for rule in rules.windows] == ["rs_tumbling"]


def test_a_worker_reads_the_rules_again_only_when_the_version_moves() -> None:
    version, loads = [1], []

    def load() -> RuleSet:
        loads.append(version[0])
        return RuleSet(version[0], ())

    sets = RuleSets()
    assert sets.current("db", lambda: version[0], load).version == 1
    assert sets.current("db", lambda: version[0], load).version == 1
    version[0] = 2
    assert sets.current("db", lambda: version[0], load).version == 2
    assert sets.current("other-db", lambda: version[0], load).version == 2
    assert loads == [1, 2, 2]
