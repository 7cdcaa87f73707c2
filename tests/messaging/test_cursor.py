"""Cursors round-trip, belong to one topic, and refuse anything the API did not hand out."""

import pytest

from wayline.core.errors import RejectedInput
from wayline.messaging.cursor import Cursor, Start


def test_a_cursor_round_trips_through_its_text() -> None:
    cursor = Cursor("orders", {0: 5, 1: 12})
    assert Cursor.decode(cursor.encode(), "orders") == cursor


def test_a_cursor_of_another_topic_is_refused() -> None:
    with pytest.raises(RejectedInput, match="cursor: it is a cursor of topic orders, not of payments"):
        Cursor.decode(Cursor("orders", {0: 1}).encode(), "payments")


@pytest.mark.parametrize("text", ["", "not base64!", "bm90IGpzb24", Cursor("t", {0: -3}).encode()])
def test_garbage_is_not_a_cursor(text: str) -> None:
    with pytest.raises(RejectedInput, match="cursor: not a cursor this API returned"):
        Cursor.decode(text, "t")


def test_starts() -> None:
    assert Start.parse("earliest") == Start("earliest")
    assert Start.parse("latest") == Start("latest")
    assert Start.parse("2026-11-24T10:00:00Z") == Start("time", 1_795_514_400_000)
    with pytest.raises(RejectedInput, match="start: 'yesterday' is not earliest, latest or an RFC 3339 time"):
        Start.parse("yesterday")
