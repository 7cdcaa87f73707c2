"""The running rules as the rules job holds them: compiled once per revision, tagged with
the rules version they were read at, and re-read by a Python worker only when it moves.

Where the rows come from is the caller's business (``wayline.pipelines.rule_sets`` reads the
registry), so this module stays pure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from wayline.core.errors import WaylineError
from wayline.rules.columns import parse_key
from wayline.rules.engine import ActiveRule
from wayline.rules.rule import RuleKind, compile_rule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuleSet:
    version: int
    rules: tuple[ActiveRule, ...]

    @property
    def filters(self) -> list[ActiveRule]:
        return [rule for rule in self.rules if rule.compiled.kind == RuleKind.FILTER]

    @property
    def joins(self) -> list[ActiveRule]:
        return [rule for rule in self.rules if rule.compiled.kind == RuleKind.JOIN]

    @property
    def key_specs(self) -> tuple[str, ...]:
        """The partition keys of the rules the Python processor runs."""
        return tuple(sorted({rule.key_spec for rule in self.rules if rule.compiled.in_processor}))

    @property
    def windows(self) -> list[ActiveRule]:
        """The window rules the JVM runs as one streaming aggregation."""
        return [rule for rule in self.rules if rule.compiled.aggregation is not None]

    def by_state_key(self) -> dict[str, ActiveRule]:
        return {rule.state_key: rule for rule in self.rules}


_compiled: dict[tuple[str, int], ActiveRule] = {}


def active_rule(row: Any) -> ActiveRule:
    """The registry row (``wayline.registry.models.Rule``, a layer above) compiled for running;
    compiled once per (id, revision) per process."""
    cached = _compiled.get((row.id, row.revision))
    if cached is None:
        key = tuple(parse_key(text) for text in row.partition_key)
        cached = _compiled[(row.id, row.revision)] = ActiveRule(
            id=row.id, revision=row.revision, name=row.name,
            compiled=compile_rule(row.sql, key),
            output_topic=row.output_topic, output_type=row.output_type,
            state_budget=row.state_budget, time_budget_ms=row.time_budget_ms,
        )
    return cached


def rule_set(version: int, rows: Iterable[Any]) -> RuleSet:
    """The rows that compile, as the rule set of ``version``."""
    rules = []
    for row in rows:
        try:
            rules.append(active_rule(row))
        except WaylineError as exc:
            # Checked at submit time; a rule that no longer compiles (an upgrade changed
            # the compiler) must not stop the others.
            log.error("rule %s (%s) does not compile: %s", row.name, row.id, exc)
    return RuleSet(version, tuple(rules))


class RuleSets:
    """The rule set of each source (a database), re-read when its rules version moves.

    One per Python worker, shared by the stateful tasks the worker runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sets: dict[str, RuleSet] = {}

    def current(self, source: str, version: Callable[[], int], load: Callable[[], RuleSet]) -> RuleSet:
        with self._lock:
            known = self._sets.get(source)
            if known is None or known.version != version():
                known = self._sets[source] = load()
            return known


__all__ = ["RuleSet", "RuleSets", "active_rule", "rule_set"]
