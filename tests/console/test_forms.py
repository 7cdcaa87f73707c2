"""Typed values out of console forms."""

from __future__ import annotations

import pytest
from starlette.datastructures import FormData

from wayline.console.forms import checked, listed, numbers, text
from wayline.core.errors import RejectedInput


def test_blank_fields_are_none_and_lists_split_on_commas_and_lines() -> None:
    form = FormData([("a", "  x "), ("b", "   "), ("types", "a.b, c.d\ne.f,,"), ("id", "1"), ("id", "2"),
                     ("schedule", "0, 5, 300")])
    assert (text(form, "a"), text(form, "b"), text(form, "absent")) == ("x", None, None)
    assert listed(form, "types") == ["a.b", "c.d", "e.f"]
    assert checked(form, "id") == ["1", "2"]
    assert numbers(form, "schedule") == [0.0, 5.0, 300.0] and numbers(form, "b") is None


def test_a_number_list_that_is_not_numbers_says_how_to_write_it() -> None:
    with pytest.raises(RejectedInput, match="numbers separated by commas"):
        numbers(FormData([("schedule", "0, soon")]), "schedule")
