"""The running rules, as the rules job reads them from the registry: in the driver, and in
each Python worker of its stateful operator (re-read when the rules version moves)."""

from __future__ import annotations

import threading

from wayline.registry import rule as rule_service
from wayline.registry.db import Database, make_engine
from wayline.rules.ruleset import RuleSet, RuleSets, rule_set


def load_rule_set(database: Database) -> RuleSet:
    with database.transaction() as session:
        return rule_set(rule_service.rules_version(session), rule_service.running(session))


def rules_version(database: Database) -> int:
    with database.transaction() as session:
        return rule_service.rules_version(session)


class WorkerRules:
    """The rule set a Python worker's stateful tasks use, re-read when the version moves."""

    _lock = threading.Lock()
    _databases: dict[str, Database] = {}
    _sets = RuleSets()

    @classmethod
    def current(cls, dsn: str) -> RuleSet:
        with cls._lock:
            database = cls._databases.get(dsn)
            if database is None:
                database = cls._databases[dsn] = Database(make_engine(dsn))
        return cls._sets.current(dsn, lambda: rules_version(database), lambda: load_rule_set(database))


__all__ = ["WorkerRules", "load_rule_set", "rules_version"]
