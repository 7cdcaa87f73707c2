"""Rules over the event stream; so far the pure-Python core of MATCH_RECOGNIZE.

- ``pattern``: the PATTERN language, parsed into a typed tree;
- ``expression``: DEFINE and MEASURES compiled from sqlglot trees into callables;
- ``automaton``: the pattern tree compiled to an ordered NFA;
- ``recognize``: a whole ``SELECT ... MATCH_RECOGNIZE (...)`` rule read into a ``PatternSpec``;
- ``matcher``: ``PartitionMatcher``, the streaming matcher for one partition.

Where the answers differ from Flink's is written down in ``docs/rules-semantics.md``: above
all, greedy quantifiers here backtrack as the SQL standard says. Over the rows
(price 15, up), (16, down), (11, flat), ``PATTERN (A+ B C)`` with ``A AS A.price > 12,
B AS B.kind = 'down', C AS C.kind = 'flat'`` finds nothing in Flink 2.3, whose ``A+``
keeps 16 and never gives it back, while Wayline, like Oracle, Trino and Snowflake, matches
A=[15], B=[16], C=[11].
"""

from wayline.rules.automaton import Automaton, compile_automaton
from wayline.rules.expression import Define, Measure
from wayline.rules.matcher import Match, MatcherSize, PartitionMatcher
from wayline.rules.pattern import Alternation, Concatenation, Pattern, Quantified, Variable, parse_pattern
from wayline.rules.recognize import AfterMatchSkip, OutputColumn, PatternSpec, SkipTo, parse_match_recognize

__all__ = [
    "AfterMatchSkip",
    "Alternation",
    "Automaton",
    "Concatenation",
    "Define",
    "Match",
    "MatcherSize",
    "Measure",
    "OutputColumn",
    "PartitionMatcher",
    "Pattern",
    "PatternSpec",
    "Quantified",
    "SkipTo",
    "Variable",
    "compile_automaton",
    "parse_match_recognize",
    "parse_pattern",
]
