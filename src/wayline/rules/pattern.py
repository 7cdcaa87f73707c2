"""The row-pattern language of MATCH_RECOGNIZE's PATTERN clause, parsed into a small typed tree.

sqlglot hands the PATTERN back as raw text (``A+ (B | C)*? D{2,3}``); this module reads it:

    pattern     := alternation
    alternation := sequence ( '|' sequence )*
    sequence    := quantified+
    quantified  := primary [ quantifier [ '?' ] ]       -- a trailing '?' makes it reluctant
    primary     := variable | '(' alternation ')'
    quantifier  := '*' | '+' | '?' | '{n}' | '{n,}' | '{n,m}' | '{,m}'

Variables are unquoted SQL identifiers and, like them, case-insensitive: they are kept
upper-case. Anything else (anchors ``^ $``, exclusion ``{- -}``, ``PERMUTE``, empty groups)
is rejected with the 1-based position of the offending character.

Two rules keep every pattern well defined for a streaming matcher, as Oracle does:
a quantified sub-pattern must not be able to match zero rows (``(A?)*`` would loop on
nothing), and the whole pattern must not be able to match zero rows (an empty match has
no rows to report and, in a stream, would fire on every row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wayline.core.errors import RejectedInput

# Quantifier bounds beyond this are a typo, not a pattern; the automaton has its own size cap.
MAX_BOUND = 1000


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    position: int = field(default=0, compare=False)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Concatenation:
    items: tuple[Pattern, ...]

    def __str__(self) -> str:
        return " ".join(_operand(item, Alternation) for item in self.items)


@dataclass(frozen=True, slots=True)
class Alternation:
    options: tuple[Pattern, ...]

    def __str__(self) -> str:
        return " | ".join(str(option) for option in self.options)


@dataclass(frozen=True, slots=True)
class Quantified:
    body: Pattern
    min: int
    max: int | None
    greedy: bool = True
    position: int = field(default=0, compare=False)

    def __str__(self) -> str:
        body = str(self.body) if isinstance(self.body, Variable) else f"({self.body})"
        return body + _quantifier_text(self.min, self.max) + ("" if self.greedy else "?")


Pattern = Variable | Concatenation | Alternation | Quantified


def parse_pattern(text: str) -> Pattern:
    """Parse PATTERN text into a tree, or raise ``RejectedInput`` naming the position."""
    return _Parser(text).parse()


def variables(pattern: Pattern) -> tuple[str, ...]:
    """The pattern's variables in order of first appearance."""
    seen: dict[str, None] = {}

    def walk(node: Pattern) -> None:
        if isinstance(node, Variable):
            seen.setdefault(node.name)
        elif isinstance(node, Concatenation):
            for item in node.items:
                walk(item)
        elif isinstance(node, Alternation):
            for option in node.options:
                walk(option)
        else:
            walk(node.body)

    walk(pattern)
    return tuple(seen)


def can_match_empty(pattern: Pattern) -> bool:
    if isinstance(pattern, Variable):
        return False
    if isinstance(pattern, Concatenation):
        return all(can_match_empty(item) for item in pattern.items)
    if isinstance(pattern, Alternation):
        return any(can_match_empty(option) for option in pattern.options)
    return pattern.min == 0 or can_match_empty(pattern.body)


def _operand(node: Pattern, loose: type) -> str:
    return f"({node})" if isinstance(node, loose) else str(node)


def _quantifier_text(low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return "*"
    if (low, high) == (1, None):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    if high is None:
        return f"{{{low},}}"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def parse(self) -> Pattern:
        self._skip_space()
        if self.pos == len(self.text):
            raise self._error("the pattern is empty", self.pos)
        tree = self._alternation()
        if self.pos < len(self.text):
            raise self._unexpected("no group is open here")
        if can_match_empty(tree):
            raise RejectedInput(
                f"PATTERN ({self.text}) can match zero rows; an empty match reports nothing "
                "and would fire on every row, so at least one row must be required"
            )
        return tree

    def _alternation(self) -> Pattern:
        options = [self._sequence()]
        while self._peek() == "|":
            self.pos += 1
            options.append(self._sequence())
        return options[0] if len(options) == 1 else Alternation(tuple(options))

    def _sequence(self) -> Pattern:
        items = []
        while self._peek() not in ("", "|", ")"):
            items.append(self._quantified())
        if not items:
            raise self._unexpected("expected a pattern variable or '('")
        return items[0] if len(items) == 1 else Concatenation(tuple(items))

    def _quantified(self) -> Pattern:
        node = self._primary()
        char = self._peek()
        if char not in ("*", "+", "?", "{"):
            return node
        start = self.pos
        low, high = self._bounds()
        greedy = True
        if self._peek() == "?":
            self.pos += 1
            greedy = False
        if self._peek() in ("*", "+", "?", "{"):
            raise self._error("a quantifier cannot follow another quantifier", self.pos)
        if can_match_empty(node):
            raise self._error(
                f"the quantified sub-pattern ({node}) can match zero rows, so its repetitions "
                "are ambiguous; make each repetition require a row", start,
            )
        return Quantified(node, low, high, greedy, start + 1)

    def _bounds(self) -> tuple[int, int | None]:
        char = self.text[self.pos]
        self.pos += 1
        if char != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        start = self.pos - 1
        if self._peek_raw() == "-":
            raise self._error("exclusion {- -} is not supported", start)
        low = self._number()
        high: int | None = low
        if self._peek() == ",":
            self.pos += 1
            high = self._number()
        if low is None and high is None:
            raise self._error("the quantifier needs a lower or an upper bound", start)
        if self._peek() != "}":
            raise self._unexpected("expected '}' to close the quantifier")
        self.pos += 1
        low = low or 0
        if high is not None and high < low:
            raise self._error(f"the quantifier's upper bound {high} is below its lower bound {low}", start)
        if high == 0:
            raise self._error("a quantifier with upper bound 0 matches nothing", start)
        if max(low, high or 0) > MAX_BOUND:
            raise self._error(f"quantifier bounds above {MAX_BOUND} are not supported", start)
        return low, high

    def _number(self) -> int | None:
        self._skip_space()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos].isdigit():
            self.pos += 1
        return int(self.text[start:self.pos]) if self.pos > start else None

    def _primary(self) -> Pattern:
        start = self.pos
        char = self._peek()
        if char == "(":
            self.pos += 1
            self._skip_space()
            if self._peek() == ")":
                raise self._error("an empty group () matches nothing", start)
            inner = self._alternation()
            if self._peek() != ")":
                raise self._unexpected(f"the group opened at position {start + 1} is not closed")
            self.pos += 1
            self._skip_space()
            return inner
        if char.isalpha() or char == "_":
            while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] == "_"):
                self.pos += 1
            name = self.text[start:self.pos].upper()
            if name == "PERMUTE" and self._peek() == "(":
                raise self._error("PERMUTE is not supported", start)
            return Variable(name, start + 1)
        if char in ("^", "$"):
            raise self._error(f"the anchor {char} is not supported", start)
        if self.text.startswith("{-", start):
            raise self._error("exclusion {- -} is not supported", start)
        if char == '"':
            raise self._error("quoted pattern variables are not supported", start)
        raise self._unexpected("expected a pattern variable or '('")

    def _peek(self) -> str:
        self._skip_space()
        return self._peek_raw()

    def _peek_raw(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def _unexpected(self, hint: str) -> RejectedInput:
        found = self._peek()
        return self._error(f"unexpected {found!r}" if found else "unexpected end of pattern",
                           self.pos, hint)

    def _error(self, problem: str, position: int, hint: str = "") -> RejectedInput:
        return RejectedInput(
            f"PATTERN ({self.text}): {problem} at position {position + 1}" + (f"; {hint}" if hint else "")
        )


__all__ = [
    "MAX_BOUND",
    "Alternation",
    "Concatenation",
    "Pattern",
    "Quantified",
    "Variable",
    "can_match_empty",
    "parse_pattern",
    "variables",
]
