"""What the deployment allows a rule (RulePolicy): Wayline's own topics and a window's fan-out."""

from __future__ import annotations

import pytest

from wayline.core.errors import RejectedInput
from wayline.core.settings import Settings
from wayline.registry.rule import RulePolicy


@pytest.fixture
def policy(tmp_path) -> RulePolicy:
    return RulePolicy.from_settings(Settings(state_dir=tmp_path))


@pytest.mark.parametrize("topic", [
    "wayline.quarantine", "wayline.rules.control", "wayline.delivery.batching", "wayline.delivery.work",
    "wayline.audit.outcomes", "wayline.recon.events", "wayline.quarantine.copy", "events.wayline.operations",
    "__consumer_offsets",
])
def test_reserved_topics_are_refused(policy: RulePolicy, topic: str) -> None:
    with pytest.raises(RejectedInput, match=rf"^output_topic: {topic} is reserved: "):
        policy.check_topic(topic)


@pytest.mark.parametrize("topic", ["events.orders", "events."])
def test_event_topics_are_refused_as_the_rules_job_reads_them(policy: RulePolicy, topic: str) -> None:
    with pytest.raises(RejectedInput, match=rf"^output_topic: {topic} is one of the event topics \(events.\*\)"):
        policy.check_topic(topic)


@pytest.mark.parametrize("topic", ["rules.alerts", "alerts.big-orders", "my-events.orders"])
def test_other_topics_are_allowed(policy: RulePolicy, topic: str) -> None:
    policy.check_topic(topic)


def test_the_reserved_topics_follow_the_settings(tmp_path) -> None:
    policy = RulePolicy.from_settings(Settings(state_dir=tmp_path, kafka={"quarantine_topic": "q.bad"}))
    with pytest.raises(RejectedInput):
        policy.check_topic("q.bad")
    policy.check_topic("q.other")


def window(size: str, slide: str) -> str:
    return f"SELECT COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, '{size}', '{slide}')"


def test_a_hopping_window_s_fan_out_is_bounded(policy: RulePolicy) -> None:
    assert policy.compile(window("1 hour", "1 minute"), None).window.size.total_seconds() == 3600
    assert policy.compile(window("1000 seconds", "1 second"), None) is not None
    with pytest.raises(RejectedInput, match=r"puts each event into 1,001 windows; at most 1,000 windows per event"):
        policy.compile(window("1001 seconds", "1 second"), None)
    with pytest.raises(RejectedInput, match="86,400,000 windows"):
        policy.compile(window("1 day", "1 millisecond"), None)
    # Sliding and session windows have no slide: one window per event.
    policy.compile("SELECT COUNT(*) AS n FROM events GROUP BY tenantid, sliding_window(event_time, '1 day')", None)
