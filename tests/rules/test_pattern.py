import pytest

from wayline.core.errors import RejectedInput
from wayline.rules.pattern import (
    Alternation,
    Concatenation,
    Quantified,
    Variable,
    parse_pattern,
    variables,
)

A, B, C, D = (Variable(name) for name in "ABCD")


@pytest.mark.parametrize(("text", "tree"), [
    ("A", A),
    ("a b", Concatenation((A, B))),
    ("A+ B C", Concatenation((Quantified(A, 1, None), B, C))),
    ("A* B? C+?", Concatenation((Quantified(A, 0, None), Quantified(B, 0, 1), Quantified(C, 1, None, greedy=False)))),
    ("A?? B", Concatenation((Quantified(A, 0, 1, greedy=False), B))),
    ("A{2} B{2,} C{2,3}? D{,3}", Concatenation((
        Quantified(A, 2, 2), Quantified(B, 2, None), Quantified(C, 2, 3, greedy=False), Quantified(D, 0, 3),
    ))),
    ("(A | B)* C{2,3}? D", Concatenation((
        Quantified(Alternation((A, B)), 0, None), Quantified(C, 2, 3, greedy=False), D,
    ))),
    ("A | B C | D", Alternation((A, Concatenation((B, C)), D))),
    ("((A))", A),
    ("A (B | C D)+", Concatenation((A, Quantified(Alternation((B, Concatenation((C, D)))), 1, None)))),
    ("A{ 1 , 3 }", Quantified(A, 1, 3)),
    ("A\n  B", Concatenation((A, B))),
    ("price_up2 _x", Concatenation((Variable("PRICE_UP2"), Variable("_X")))),
])
def test_patterns_parse_into_trees(text: str, tree: object) -> None:
    assert parse_pattern(text) == tree


@pytest.mark.parametrize("text", ["A+ B C", "(A | B)* C{2,3}? D", "A{2,} (B C)+? D{,3}", "A | B"])
def test_a_tree_prints_back_as_the_same_pattern(text: str) -> None:
    assert parse_pattern(str(parse_pattern(text))) == parse_pattern(text)


def test_variables_are_listed_once_in_order_of_appearance() -> None:
    assert variables(parse_pattern("b (A | B)+ c a")) == ("B", "A", "C")


def test_positions_point_into_the_text() -> None:
    tree = parse_pattern("A  B+")
    assert isinstance(tree, Concatenation)
    assert tree.items[0].position == 1
    assert isinstance(tree.items[1], Quantified) and tree.items[1].position == 5
    assert tree.items[1].body.position == 4  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "message"), [
    ("", "PATTERN (): the pattern is empty at position 1"),
    ("A + * B", "PATTERN (A + * B): a quantifier cannot follow another quantifier at position 5"),
    ("A{2}{3}", "PATTERN (A{2}{3}): a quantifier cannot follow another quantifier at position 5"),
    ("A+??", "PATTERN (A+??): a quantifier cannot follow another quantifier at position 4"),
    ("A B)", "PATTERN (A B)): unexpected ')' at position 4; no group is open here"),
    ("(A B", "PATTERN ((A B): unexpected end of pattern at position 5; the group opened at position 1 is not closed"),
    ("A, B", "PATTERN (A, B): unexpected ',' at position 2; expected a pattern variable or '('"),
    ("A | ", "PATTERN (A | ): unexpected end of pattern at position 5; expected a pattern variable or '('"),
    ("A ||B", "PATTERN (A ||B): unexpected '|' at position 4; expected a pattern variable or '('"),
    ("()", "PATTERN (()): an empty group () matches nothing at position 1"),
    ("A{3,2}", "PATTERN (A{3,2}): the quantifier's upper bound 2 is below its lower bound 3 at position 2"),
    ("A{0}", "PATTERN (A{0}): a quantifier with upper bound 0 matches nothing at position 2"),
    ("A{}", "PATTERN (A{}): the quantifier needs a lower or an upper bound at position 2"),
    ("A{,}", "PATTERN (A{,}): the quantifier needs a lower or an upper bound at position 2"),
    ("A{2 B", "PATTERN (A{2 B): unexpected 'B' at position 5; expected '}' to close the quantifier"),
    ("A{1001}", "PATTERN (A{1001}): quantifier bounds above 1000 are not supported at position 2"),
    ("^A", "PATTERN (^A): the anchor ^ is not supported at position 1"),
    ("A B $", "PATTERN (A B $): the anchor $ is not supported at position 5"),
    ("A {- B -} C", "PATTERN (A {- B -} C): exclusion {- -} is not supported at position 3"),
    ("{- A -} B", "PATTERN ({- A -} B): exclusion {- -} is not supported at position 1"),
    ("PERMUTE(A, B)", "PATTERN (PERMUTE(A, B)): PERMUTE is not supported at position 1"),
    ('"a" B', "PATTERN (\"a\" B): quoted pattern variables are not supported at position 1"),
    ("(A?)* B", "PATTERN ((A?)* B): the quantified sub-pattern (A?) can match zero rows, so its "
                "repetitions are ambiguous; make each repetition require a row at position 5"),
    ("(A | B*)+", "PATTERN ((A | B*)+): the quantified sub-pattern (A | B*) can match zero rows"),
])
def test_invalid_patterns_are_rejected_with_the_position(text: str, message: str) -> None:
    with pytest.raises(RejectedInput) as raised:
        parse_pattern(text)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("text", ["A*", "A? B*", "(A | B?)", "A{,3}"])
def test_patterns_that_can_match_no_rows_are_rejected(text: str) -> None:
    with pytest.raises(RejectedInput, match="can match zero rows; an empty match reports nothing"):
        parse_pattern(text)
