"""The events stream every rule reads, and the columns a rule's SQL names in it.

A rule reads the parsed envelope (``EVENT_COLUMNS``) and any path into the event's JSON
``data`` (``data.amount``, ``data.user.id``); a column is a path of names (``ColumnPath``).
The rule compiler (``wayline.rules.rule``) and the join compiler (``wayline.rules.join``)
check the columns a rule names here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from sqlglot import exp

from wayline.core.errors import RejectedInput
from wayline.rules.expression import DIALECT, ColumnPath, located

# The stream every rule reads: the parsed envelope (see wayline.pipelines.envelope).
EVENT_COLUMNS = (
    "id", "source", "type", "specversion", "subject", "time", "datacontenttype", "dataschema",
    "tenantid", "subtenantid", "data", "event_time", "topic",
)
EVENT_TIME = "event_time"
DATA = "data"
# What `SELECT *` outputs.
STAR_COLUMNS = ("id", "source", "type", "subject", "time", "tenantid", "subtenantid", "data")


def key_name(path: ColumnPath) -> str:
    return ".".join(path)


def parse_key(text: str) -> ColumnPath:
    """A partition key column as the API takes it (``tenantid``, ``data.user.id``)."""
    path = tuple(part.strip() for part in text.split("."))
    if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) for part in path):
        raise RejectedInput(f"partition_key: {text!r} is not a column name or a data.<path>")
    check_column(path, "partition_key")
    return path


def check_column(path: ColumnPath, clause: str) -> None:
    if path[0] == DATA:
        quoted = next((key for key in path[1:] if "'" in key and '"' in key), None)
        if quoted is not None:
            # Spark's variant paths quote a key with ' or ", and have no escape for a key holding both.
            raise RejectedInput(f"{clause}: the key {quoted!r} of {key_name(path)} contains both ' and \", "
                                "which Spark's JSON paths cannot quote")
        return
    if len(path) == 1 and path[0] in EVENT_COLUMNS:
        return
    raise RejectedInput(
        f"{clause}: unknown column {key_name(path)}; the events stream has "
        f"{', '.join(EVENT_COLUMNS)} and data.<path>"
    )


def output_name(item: exp.Expression) -> str:
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, (exp.Column, exp.Dot)):
        return path_of(item)[-1]
    raise RejectedInput(f"SELECT {item.sql(dialect=DIALECT)}: an expression needs a name (AS name){located(item)}")


def column_paths(tree: exp.Expression) -> Iterator[tuple[ColumnPath, exp.Expression]]:
    """Every column reference in the tree, outermost only (``data.a.b`` once, not its parts)."""
    for node in tree.walk():
        if isinstance(node, (exp.Column, exp.Dot)) and not isinstance(node.parent, (exp.Column, exp.Dot)):
            if isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
                continue
            yield path_of(node), node


def path_of(node: exp.Expression) -> ColumnPath:
    parts: list[str] = []
    while isinstance(node, exp.Dot):
        parts.insert(0, node.expression.name)
        node = node.this
    if not isinstance(node, exp.Column):
        raise RejectedInput(f"{node.sql(dialect=DIALECT)} is not a column{located(node)}")
    return tuple(part.name for part in node.parts) + tuple(parts)


__all__ = [
    "DATA", "EVENT_COLUMNS", "EVENT_TIME", "STAR_COLUMNS", "check_column", "column_paths", "key_name",
    "output_name", "parse_key", "path_of",
]
