import pytest

from wayline.core.errors import RejectedInput
from wayline.rules.automaton import MATCH, compile_automaton
from wayline.rules.pattern import parse_pattern, variables


def automaton_of(text: str):  # type: ignore[no-untyped-def]
    pattern = parse_pattern(text)
    return compile_automaton(pattern, variables(pattern))


def test_successors_are_listed_in_preference_order() -> None:
    greedy = automaton_of("A+ B")
    # States: A (the required copy), A (the loop), B.
    assert greedy.variable_of == (0, 0, 1)
    assert greedy.start == (0,)
    assert greedy.follow == ((1, 2), (1, 2), (MATCH,))
    reluctant = automaton_of("A+? B")
    assert reluctant.follow == ((2, 1), (2, 1), (MATCH,))


def test_ending_the_match_ranks_among_the_successors() -> None:
    assert automaton_of("A B*").follow[0] == (1, MATCH)
    assert automaton_of("A B*?").follow[0] == (MATCH, 1)


def test_alternatives_keep_their_order() -> None:
    automaton = automaton_of("(B | A | C) D")
    assert [automaton.variables[automaton.variable_of[state]] for state in automaton.start] == ["B", "A", "C"]


def test_bounded_quantifiers_expand_into_copies() -> None:
    automaton = automaton_of("A{2,4} B")
    assert automaton.variable_of == (0, 0, 0, 0, 1)
    assert automaton.follow[1] == (2, 4)  # after two A: a third, or B
    assert automaton.follow[3] == (4,)  # after four A: only B


def test_expansion_is_bounded() -> None:
    with pytest.raises(RejectedInput, match="expands to more than 10000 row positions"):
        automaton_of("(A{1000} B){20}")


@pytest.mark.parametrize(("text", "variable", "omit", "first", "only_first"), [
    ("A B+ C", "A", False, True, True),
    ("A B+ C", "B", False, False, False),
    ("A A+ C", "A", False, True, False),
    ("(A | B) C", "A", True, True, True),
    ("X? A C", "A", False, True, True),
])
def test_questions_about_where_a_variable_can_be(
    text: str, variable: str, omit: bool, first: bool, only_first: bool,
) -> None:
    automaton = automaton_of(text)
    assert automaton.may_omit(variable) is omit
    assert automaton.may_start_with(variable) is first
    assert automaton.may_start_with_only(variable) is only_first
