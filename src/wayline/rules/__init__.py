"""Rules over the event stream, in pure Python: no Spark, no database (the rules job in
``wayline.pipelines.rules_job`` wires them into a query and reads the registry for them).

- ``rule``: a rule's SQL compiled: a filter, a window aggregation or a MATCH_RECOGNIZE pattern;
- ``columns``: the events stream every rule reads, and the columns a rule names in it;
- ``spark_sql``: the Spark SQL a filter or join rule may use, and how ``data.*`` is typed there;
- ``pattern``: the PATTERN language, parsed into a typed tree;
- ``expression``: DEFINE and MEASURES compiled from sqlglot trees into callables;
- ``automaton``: the pattern tree compiled to an ordered NFA;
- ``recognize``: a whole ``SELECT ... MATCH_RECOGNIZE (...)`` rule read into a ``PatternSpec``;
- ``matcher``: ``PartitionMatcher``, the streaming matcher for one partition;
- ``window``, ``sliding``, ``session``, ``reorder``: window aggregations and the event-time order they need;
- ``window_compiler``: a window rule's SQL checked and compiled to a ``WindowSpec``;
- ``prefilter``: the rows a rule can use, worked out on a whole group at once;
- ``engine``: one group's rules evaluated together (``GroupEvaluator``), with budgets and isolation;
- ``group_state``: what a group keeps between micro-batches, encoded (``GroupState``: columns, segments);
- ``ruleset``: the running rules, compiled once per revision and re-read when the version moves;
- ``counters``, ``metrics``: what the job counts per rule, and its Prometheus view.

This package exposes the names of the MATCH_RECOGNIZE core below; everything else is
imported from its module.

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
