"""Rules from the compacted control topic: create, change, remove, and bad records set aside."""

import time

import pytest

from tests.waiting import wait_for
from wayline.registry import rule as rule_service
from wayline.registry.access import ADMIN
from wayline.registry.models import Rule
from wayline.registry.rule_control import ControlTopic, publish

pytestmark = pytest.mark.integration

SQL = "SELECT id FROM events WHERE type = 'control.test'"


def _rule(database, name: str) -> Rule | None:
    from sqlalchemy import select

    with database.transaction() as session:
        return session.scalar(select(Rule).where(Rule.name == name))


def _apply_until(control: ControlTopic, database, done) -> None:
    def applied() -> bool:
        control.apply_pending(database, timeout_s=0.5)  # waits up to half a second for records
        return done()

    wait_for(applied, "the control records to be applied", 30, every_s=0)


def test_control_records_create_change_and_remove_rules(settings, database, unique) -> None:
    control_settings = settings.model_copy(update={
        "rules": settings.rules.model_copy(update={"control_topic": f"wayline.rules.control.{unique}"})})
    control = ControlTopic(control_settings, group_id=f"control-{unique}")
    name = f"ctl-{unique}"
    try:
        publish(control_settings, name, {"sql": SQL, "output_topic": "rules.out.ctl", "output_type": "alert.ctl"})
        publish(control_settings, f"bad-{unique}", {"sql": "SELECT nope FROM events", "output_topic": "t",
                                                    "output_type": "x"})
        _apply_until(control, database, lambda: _rule(database, name) is not None and control.rejected)
        assert _rule(database, name).revision == 1
        assert control.rejected[0][0] == f"bad-{unique}" and "unknown column nope" in control.rejected[0][1]
        assert _rule(database, f"bad-{unique}") is None

        publish(control_settings, name, {"sql": SQL + " AND id = 'x'", "output_topic": "rules.out.ctl",
                                         "output_type": "alert.ctl"})
        _apply_until(control, database, lambda: _rule(database, name).revision == 2)
        publish(control_settings, name, None)
        _apply_until(control, database, lambda: _rule(database, name) is None)
    finally:
        control.close()
        with database.transaction() as session:
            rule_service.delete_by_name(session, ADMIN, name)


def test_the_control_consumer_outlives_an_idle_spell_longer_than_its_poll_interval(settings, database, unique) -> None:
    """The rules job polls the control topic before each micro-batch, and an idle job runs
    none: past max.poll.interval.ms librdkafka left the group, the next poll held only that
    error, and committing it raised _NO_OFFSET, which stopped the job."""
    interval_s = 6.0  # the broker's least session timeout; the default is 300 s
    control_settings = settings.model_copy(update={"rules": settings.rules.model_copy(update={
        "control_topic": f"wayline.rules.control.{unique}", "control_max_poll_interval_s": interval_s})})
    control = ControlTopic(control_settings, group_id=f"control-{unique}")
    name = f"idle-{unique}"
    definition = {"sql": SQL, "output_topic": "rules.out.ctl", "output_type": "alert.ctl"}
    try:
        publish(control_settings, name, definition)
        _apply_until(control, database, lambda: _rule(database, name) is not None)
        time.sleep(interval_s * 1.5)  # the scenario: an idle spell past the poll interval
        assert control.apply_pending(database, timeout_s=0.5) == 0
        publish(control_settings, name, {**definition, "sql": SQL + " AND id = 'after'"})
        _apply_until(control, database, lambda: _rule(database, name).revision == 2)
    finally:
        control.close()
        with database.transaction() as session:
            rule_service.delete_by_name(session, ADMIN, name)
