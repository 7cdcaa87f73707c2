"""A pattern tree compiled to an ordered NFA, ready for a priority-ordered (Pike) simulation.

The tree is first emitted as a small Thompson program — consume a row as variable V, split
(try one branch before the other), jump, match — with bounded quantifiers expanded into
copies (``X{2,4}`` is ``X X (X (X)?)?``, the splits leaning towards more copies when greedy
and fewer when reluctant). Because no quantified body can match zero rows
(``wayline.rules.pattern`` rejects that), the moves that consume no row never loop, so
every epsilon closure is known at compile time. The automaton keeps only what the matcher
walks: one *state* per consume instruction, labelled with its variable, and for each state
the states it may consume next, in preference order, with ``MATCH`` marking the point where
ending the match ranks among them.

The preference order of the closures is the SQL standard's order of row-pattern matches:
left alternatives before right ones, one more iteration before one fewer for greedy
quantifiers, the reverse for reluctant ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wayline.core.errors import RejectedInput
from wayline.rules.pattern import Alternation, Concatenation, Pattern, Quantified, Variable

# The end of a match, as it appears among a state's successors.
MATCH = -1

# Expanding bounded quantifiers multiplies states (``(A{50} B){20}``); past this many the
# per-row work would no longer be small.
MAX_STATES = 10_000

_CONSUME, _SPLIT, _JUMP, _MATCH = range(4)


@dataclass(frozen=True, slots=True)
class Automaton:
    """States are indexes; ``variable_of[s]`` indexes ``variables``."""

    variables: tuple[str, ...]
    variable_of: tuple[int, ...]
    start: tuple[int, ...]
    follow: tuple[tuple[int, ...], ...]

    def may_omit(self, variable: str) -> bool:
        """Whether some match maps no row to ``variable``."""
        banned = self.variables.index(variable)
        return self._reaches_match(self.start, banned)

    def may_start_with(self, variable: str) -> bool:
        """Whether some match maps its first row to ``variable``."""
        index = self.variables.index(variable)
        return any(self.variable_of[state] == index for state in self.start)

    def may_start_with_only(self, variable: str) -> bool:
        """Whether some match maps its first row, and no other, to ``variable``."""
        index = self.variables.index(variable)
        firsts = [state for state in self.start if self.variable_of[state] == index]
        return any(self._reaches_match(self.follow[state], index) for state in firsts)

    def first_positions(self) -> tuple[int | None, ...]:
        """For each variable, the earliest position in a match (0: the first row) at which
        it can map a row; None if it can map none."""
        first: list[int | None] = [None] * len(self.variables)
        depth = {state: 0 for state in self.start}
        frontier = list(self.start)
        while frontier:
            following = []
            for state in frontier:
                variable = self.variable_of[state]
                if first[variable] is None:
                    first[variable] = depth[state]
                for successor in self.follow[state]:
                    if successor != MATCH and successor not in depth:
                        depth[successor] = depth[state] + 1
                        following.append(successor)
            frontier = following
        return tuple(first)

    def _reaches_match(self, frontier: Sequence[int], banned: int) -> bool:
        seen: set[int] = set()
        stack = list(frontier)
        while stack:
            state = stack.pop()
            if state == MATCH:
                return True
            if state in seen or self.variable_of[state] == banned:
                continue
            seen.add(state)
            stack.extend(self.follow[state])
        return False


def compile_automaton(pattern: Pattern, variables: Sequence[str]) -> Automaton:
    """Compile a pattern whose variables are all listed in ``variables``."""
    program = _Program({name: index for index, name in enumerate(variables)})
    program.emit(pattern)
    program.add(_MATCH)
    return program.automaton(tuple(variables))


class _Program:
    def __init__(self, variable_index: dict[str, int]) -> None:
        self.variable_index = variable_index
        self.code: list[list[int]] = []
        self.consumes = 0

    def add(self, op: int, a: int = 0, b: int = 0) -> int:
        self.code.append([op, a, b])
        return len(self.code) - 1

    def emit(self, node: Pattern) -> None:
        if isinstance(node, Variable):
            self.consumes += 1
            if self.consumes > MAX_STATES:
                raise RejectedInput(
                    f"the PATTERN expands to more than {MAX_STATES} row positions once its "
                    "quantifier bounds are multiplied out; use smaller bounds"
                )
            self.add(_CONSUME, self.variable_index[node.name])
        elif isinstance(node, Concatenation):
            for item in node.items:
                self.emit(item)
        elif isinstance(node, Alternation):
            self._alternation(node.options)
        else:
            self._quantified(node)

    def _alternation(self, options: Sequence[Pattern]) -> None:
        jumps = []
        for option in options[:-1]:
            split = self.add(_SPLIT, len(self.code) + 1)
            self.emit(option)
            jumps.append(self.add(_JUMP))
            self.code[split][2] = len(self.code)
        self.emit(options[-1])
        for jump in jumps:
            self.code[jump][1] = len(self.code)

    def _quantified(self, node: Quantified) -> None:
        for _ in range(node.min):
            self.emit(node.body)
        if node.max is None:
            loop = self.add(_SPLIT)
            self.emit(node.body)
            self.add(_JUMP, loop)
            self._lean(loop, loop + 1, len(self.code), node.greedy)
            return
        splits = []
        for _ in range(node.max - node.min):
            splits.append(self.add(_SPLIT))
            self.emit(node.body)
        for split in splits:
            self._lean(split, split + 1, len(self.code), node.greedy)

    def _lean(self, split: int, again: int, done: int, greedy: bool) -> None:
        self.code[split][1:] = [again, done] if greedy else [done, again]

    def automaton(self, variables: tuple[str, ...]) -> Automaton:
        state_of = {}
        for pc, (op, _, _) in enumerate(self.code):
            if op == _CONSUME:
                state_of[pc] = len(state_of)
        return Automaton(
            variables=variables,
            variable_of=tuple(self.code[pc][1] for pc in state_of),
            start=self._closure(0, state_of),
            follow=tuple(self._closure(pc + 1, state_of) for pc in state_of),
        )

    def _closure(self, pc: int, state_of: dict[int, int]) -> tuple[int, ...]:
        """Consume states and MATCH reachable without consuming, in preference order.

        A depth-first walk taking each split's preferred branch first lists them in the
        standard's order; a second path to the same instruction is dropped, as everything
        it could lead to is already reachable, and preferred, through the first.
        """
        out: list[int] = []
        seen: set[int] = set()
        stack = [pc]
        while stack:
            at = stack.pop()
            if at in seen:
                continue
            seen.add(at)
            op, a, b = self.code[at]
            if op == _CONSUME:
                out.append(state_of[at])
            elif op == _MATCH:
                out.append(MATCH)
            elif op == _JUMP:
                stack.append(a)
            else:
                stack.extend((b, a))
        return tuple(out)


__all__ = ["MATCH", "MAX_STATES", "Automaton", "compile_automaton"]
