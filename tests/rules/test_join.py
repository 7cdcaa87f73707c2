"""Join rules at submit time: what compiles to which Spark SQL, and what is refused with which message."""

from __future__ import annotations

from datetime import timedelta

import pytest

from wayline.core.errors import RejectedInput
from wayline.rules.join import JoinKind
from wayline.rules.rule import RuleKind, compile_rule

ENRICH = ("SELECT e.id, e.data.amount AS amount, r.data.tier AS tier FROM events e "
          "LEFT JOIN reference.customers r ON r.key = e.data.customer WHERE e.type = 'order'")
ORDER = "TRY_VARIANT_GET(`{side}`.`data`, '$[\\'order\\']', 'string')"
PAYMENTS = ("SELECT a.id AS order_id, b.id AS payment_id FROM events a JOIN events b "
            "ON a.data.order = b.data.order AND b.type = 'payment' "
            "AND b.event_time BETWEEN a.event_time AND a.event_time + INTERVAL '10' MINUTE WHERE a.type = 'order'")


def test_a_stream_table_join_compiles_to_spark_sql_over_the_two_aliases() -> None:
    rule = compile_rule(ENRICH)
    assert (rule.kind, rule.stateful, rule.time_bound) == (RuleKind.JOIN, False, None)
    join = rule.join
    assert (join.kind, join.outer, join.left, join.right, join.table) == (JoinKind.TABLE, True, "e", "r", "customers")
    assert join.condition == "(`r`.`key` = TRY_VARIANT_GET(`e`.`data`, '$[\\'customer\\']', 'string'))"
    assert (join.where, join.left_where, join.right_where, join.left_on) == (None, "(`e`.`type` = 'order')", None, None)
    assert join.key == "CAST(TRY_VARIANT_GET(`e`.`data`, '$[\\'customer\\']', 'string') AS STRING)"
    assert [name for name, _ in join.select] == ["id", "amount", "tier"]
    assert dict(join.select)["tier"] == "TRY_VARIANT_GET(`r`.`data`, '$[\\'tier\\']', 'variant')"


def test_an_interval_join_keeps_its_bound_as_two_comparisons_spark_can_bound_state_with() -> None:
    rule = compile_rule(PAYMENTS)
    join = rule.join
    assert (join.kind, join.outer, join.table) == (JoinKind.INTERVAL, False, None)
    assert (join.lower, join.upper, rule.time_bound) == (timedelta(0), timedelta(minutes=10), timedelta(minutes=10))
    assert join.condition.endswith(
        "AND (`b`.`event_time` >= `a`.`event_time` + INTERVAL '0.000000' SECOND) "
        "AND (`b`.`event_time` <= `a`.`event_time` + INTERVAL '600.000000' SECOND)")
    # NULL never equals NULL: an event without the key meets nothing.
    assert (join.left_where, join.right_where) == (
        f"(NOT {ORDER.format(side='a')} IS NULL) AND (`a`.`type` = 'order')",
        f"(NOT {ORDER.format(side='b')} IS NULL) AND (`b`.`type` = 'payment')")


def test_strict_bounds_stay_strict() -> None:
    join = compile_rule(
        "SELECT a.id AS aid, b.id AS bid FROM events a JOIN events b ON a.data.k = b.data.k AND b.type = 'p' "
        "AND b.event_time > a.event_time AND b.event_time < a.event_time + INTERVAL '5' SECOND WHERE a.type = 'o'").join
    assert join.condition.endswith(
        "AND (`b`.`event_time` > `a`.`event_time` + INTERVAL '0.000000' SECOND) "
        "AND (`b`.`event_time` < `a`.`event_time` + INTERVAL '5.000000' SECOND)")


@pytest.mark.parametrize(("bound", "rendered"), [
    ("INTERVAL '0.00005' SECOND", "INTERVAL '0.000050' SECOND"),
    ("INTERVAL '1' MILLISECOND", "INTERVAL '0.001000' SECOND"),
    ("INTERVAL '90.5' MINUTE", "INTERVAL '5430.000000' SECOND"),
])
def test_a_bound_renders_as_an_interval_spark_reads_to_the_microsecond(bound: str, rendered: str) -> None:
    join = compile_rule("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k "
                        f"AND b.event_time BETWEEN a.event_time - {bound} AND a.event_time + {bound}").join
    negative = rendered.replace("'", "'-", 1)
    assert join.condition.endswith(f">= `a`.`event_time` + {negative}) AND (`b`.`event_time` <= `a`.`event_time` "
                                   f"+ {rendered})"), join.condition


def test_conditions_go_to_the_side_they_read_and_a_left_join_keeps_its_left_events() -> None:
    # In a LEFT JOIN, ON's conditions on a decide matches (a stays, unmatched), and WHERE's
    # on b apply after the join; in an inner join both filter the sides before it.
    sql = ("SELECT a.id AS x FROM events a {how} events b ON a.data.k = b.data.k AND a.data.n > 1 AND b.type = 'p' "
           "AND b.event_time BETWEEN a.event_time AND a.event_time + INTERVAL '1' MINUTE "
           "WHERE a.type = 'o' AND b.data.m = 2 AND a.data.n < b.data.n")
    n = "(TRY_VARIANT_GET(`a`.`data`, '$[\\'n\\']', 'double') > 1)"
    k = "(NOT TRY_VARIANT_GET(`{side}`.`data`, '$[\\'k\\']', 'string') IS NULL)"
    m = "(TRY_VARIANT_GET(`b`.`data`, '$[\\'m\\']', 'double') = 2)"
    # Two paths compared with each other read as strings, as in filters.
    both = "(TRY_VARIANT_GET(`a`.`data`, '$[\\'n\\']', 'string') < TRY_VARIANT_GET(`b`.`data`, '$[\\'n\\']', 'string'))"
    a_key, b_key = k.format(side="a"), k.format(side="b")
    inner = compile_rule(sql.format(how="JOIN")).join
    assert (inner.left_where, inner.right_where, inner.where, inner.left_on) == (
        f"{a_key} AND {n} AND (`a`.`type` = 'o')", f"{b_key} AND (`b`.`type` = 'p') AND {m}", both, None)
    assert n not in inner.condition
    outer = compile_rule(sql.format(how="LEFT JOIN")).join
    assert (outer.left_where, outer.right_where, outer.where, outer.left_on) == (
        "(`a`.`type` = 'o')", f"{b_key} AND (`b`.`type` = 'p')", f"{m} AND {both}", f"{a_key} AND {n}")
    assert n not in outer.condition


@pytest.mark.parametrize(("bound", "lower", "upper"), [
    ("b.event_time >= a.event_time AND b.event_time <= a.event_time", timedelta(0), timedelta(0)),
    ("b.event_time > a.event_time AND b.event_time < a.event_time + INTERVAL '0.000002' SECOND",
     timedelta(0), timedelta(microseconds=2)),
    ("b.event_time >= a.event_time - INTERVAL '1' MINUTE AND b.event_time < a.event_time + INTERVAL '2' MINUTE",
     timedelta(minutes=-1), timedelta(minutes=2)),
    ("a.event_time + INTERVAL '5' SECOND >= b.event_time AND a.event_time <= b.event_time",
     timedelta(0), timedelta(seconds=5)),
])
def test_an_interval_bound_may_be_written_as_comparisons(bound: str, lower: timedelta, upper: timedelta) -> None:
    join = compile_rule(f"SELECT a.id AS x FROM events a LEFT OUTER JOIN events b ON a.data.k = b.data.k AND {bound}").join
    assert (join.outer, join.lower, join.upper) == (True, lower, upper)


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k",
     "ON: an interval join needs a time bound on both ends"),
    ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k AND b.event_time >= a.event_time",
     "ON: an interval join needs a time bound on both ends"),
    ("SELECT a.id AS x FROM events a JOIN events b ON b.event_time BETWEEN a.event_time AND a.event_time "
     "+ INTERVAL '1' MINUTE", "ON: an interval join pairs events by key"),
    ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k AND b.event_time BETWEEN "
     "a.event_time + INTERVAL '2' MINUTE AND a.event_time", "ON: the time bound is empty"),
    ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k AND b.event_time > a.event_time "
     "AND b.event_time < a.event_time",
     "ON: the time bound is empty: no b.event_time is after a.event_time and before a.event_time"),
    ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k AND b.event_time >= a.event_time "
     "AND b.event_time < a.event_time", "ON: the time bound is empty: no b.event_time is at or after a.event_time "
     "and before a.event_time"),
    ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k AND b.event_time > a.event_time "
     "- INTERVAL '1' SECOND AND b.event_time <= a.event_time - INTERVAL '1' SECOND",
     "ON: the time bound is empty: no b.event_time is after a.event_time - 0:00:01 and at or before"),
    # Event times are whole microseconds: nothing lies strictly between two neighbours.
    ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k AND b.event_time > a.event_time "
     "AND b.event_time < a.event_time + INTERVAL '0.000001' SECOND", "ON: the time bound is empty"),
    ("SELECT e.id FROM events e JOIN reference.customers r ON r.data.x = e.data.customer",
     "ON: a join with a reference table looks rows up by key"),
    ("SELECT e.id FROM events e RIGHT JOIN reference.customers r ON r.key = e.data.c",
     "RIGHT JOIN is not supported: use JOIN (inner) or LEFT JOIN"),
    ("SELECT e.id FROM events e FULL OUTER JOIN reference.customers r ON r.key = e.data.c",
     "FULL OUTER JOIN is not supported"),
    ("SELECT e.id FROM events e JOIN customers r ON r.key = e.data.c",
     "JOIN customers AS r: a rule joins events with events (an interval join) or with a reference table"),
    ("SELECT id FROM events e JOIN reference.customers r ON r.key = e.data.c",
     "SELECT: id is not qualified by a side of the join; write e.id or r.id"),
    ("SELECT e.amount FROM events e JOIN reference.customers r ON r.key = e.data.c",
     "SELECT: unknown column amount; the events stream has"),
    ("SELECT r.tier FROM events e JOIN reference.customers r ON r.key = e.data.c",
     "SELECT: unknown column r.tier; a reference table has r.key and r.data.<path>"),
    ("SELECT * FROM events e JOIN reference.customers r ON r.key = e.data.c", "SELECT *: name the columns"),
    ("SELECT e.id FROM events e JOIN events e ON e.data.k = e.data.k", "JOIN: both sides are called e"),
    ("SELECT e.id FROM events e JOIN reference.c r ON r.key = e.data.c JOIN reference.d s ON s.key = e.data.d",
     "a join rule joins events with one reference table or with events once"),
    ("SELECT e.id FROM events e JOIN reference.c r USING (key)", "JOIN needs an ON condition"),
    ("SELECT e.id FROM events e JOIN reference.c r ON r.key = e.data.c AND reflect('a', 'b') = 1",
     "function REFLECT() is not supported"),
    ("SELECT e.id FROM events e JOIN reference.c r ON r.key = e.data.c GROUP BY e.id",
     "GROUP is not supported in a join rule"),
])
def test_a_bad_join_is_refused_naming_what_is_wrong(sql: str, message: str) -> None:
    with pytest.raises(RejectedInput) as caught:
        compile_rule(sql)
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_join_takes_no_partition_key() -> None:
    with pytest.raises(RejectedInput, match="partition_key: a join rule's output subject is its join key"):
        compile_rule(ENRICH, (("tenantid",),))


def test_data_paths_ordered_against_each_other_compile_with_a_warning() -> None:
    sql = ("SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k AND b.event_time BETWEEN "
           "a.event_time AND a.event_time + INTERVAL '1' MINUTE WHERE a.data.n < b.data.n")
    [warning] = compile_rule(sql).warnings
    assert warning.startswith("a.data.n < b.data.n: data.* paths compared with each other are read as strings")
    # Equality of text is equality: no warning for the key.
    assert compile_rule(sql.replace("a.data.n < b.data.n", "a.data.n = b.data.n")).warnings == ()
