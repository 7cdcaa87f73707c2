"""Reserved topics: the broker's, Wayline's prefix, and the internal topics the settings name."""

from __future__ import annotations

import pytest

from wayline.core.errors import Forbidden, RejectedInput
from wayline.core.settings import Settings
from wayline.core.topics import ReservedTopics

RESERVED = ReservedTopics.from_settings(Settings())


@pytest.mark.parametrize("topic", [
    "wayline.delivery.work", "wayline.delivery.batching", "wayline.quarantine", "wayline.audit.consumed",
    "wayline.audit.outcomes", "wayline.rules.control", "wayline.recon.events", "wayline.anything.new",
    "events.wayline.operations", "__consumer_offsets", "__transaction_state",
])
def test_internal_and_broker_topics_are_reserved(topic: str) -> None:
    assert RESERVED.reason(topic) is not None
    with pytest.raises(Forbidden, match=f"^topic {topic} is reserved, this API key may not publish it: "):
        RESERVED.refuse(topic, "publish")
    with pytest.raises(RejectedInput, match=f"^output_topic: {topic} is reserved: "):
        RESERVED.refuse_field("output_topic", topic)


@pytest.mark.parametrize("topic", ["events.orders", "alerts.big", "waylines.x", "my.wayline.quarantine", "_x"])
def test_other_topics_are_not(topic: str) -> None:
    assert RESERVED.reason(topic) is None
    RESERVED.refuse(topic, "publish")


def test_the_reason_says_whose_topic_it_is() -> None:
    assert RESERVED.reason("__consumer_offsets") == (
        "topics named __* are the Kafka broker's own (offsets, transaction state)")
    assert RESERVED.reason("wayline.delivery.work") == (
        "it is one of Wayline's own topics (wayline.*, events.wayline.operations), which only Wayline writes: "
        "its jobs trust what they read there")


def test_internal_topics_follow_the_settings() -> None:
    moved = ReservedTopics.from_settings(Settings(delivery={"work_topic": "ops.work"}, audit={"consumed_topic": "a.c"}))
    assert moved.reason("ops.work") is not None and moved.reason("a.c") is not None
    assert RESERVED.reason("ops.work") is None


@pytest.mark.parametrize(("pattern", "reserved_only"), [
    ("wayline.*", True), ("wayline.delivery.work", True), ("__*", True), ("__consumer_offsets", True),
    ("events.wayline.operations", True), ("wayline.[a-z]*", True),
    ("*", False), ("events.*", False), ("way*", False), ("events.wayline.operations*", False), ("_*", False),
])
def test_a_grant_pattern_is_reserved_when_it_can_match_reserved_topics_only(pattern: str, reserved_only: bool) -> None:
    assert (RESERVED.pattern_reason(pattern) is not None) is reserved_only
