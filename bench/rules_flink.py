"""Flink SQL over the same events and the same rule mix as ``bench/rules.py``: the baseline.

``bench/rules.py --flink`` runs this right after Wayline's configurations, in its own
virtualenv (``make bench-flink``: PyFlink from PyPI in ``bench/results/flink-venv``, and
Flink's Kafka SQL connector from Maven Central, the ``flink`` profile of pom.xml, in
``jars/flink``), against the same broker and topic Wayline has just read. It prints one JSON
line per configuration on stdout.

Each configuration is one Flink job on a local mini-cluster at parallelism 2: every rule
of the mix as SQL, in one statement set whose inserts read one Kafka source (Flink reuses
it) and write every output to one Kafka topic, as Wayline writes its outputs. The source is
bounded at the topic's end offsets, so the job ends once it has read every event. Rule ``i``
of each kind is the same rule as in ``bench/rules.py``: filter thresholds ``900 + i`` and
``i % 7``, window ``HAVING SUM(amount) > 1500 + i``, the two patterns (``F{3,} S`` and
``A B+ C``) alternating with ``i`` in their conditions (``PREV(price)`` for the standard's
``PREV(B.price)`` in B's own condition, the same row: Flink refuses a qualified one); windows of one minute per user,
patterns per user WITHIN five minutes, event time from the CloudEvent's ``time`` with the
same allowed lateness as Wayline's watermark.

The rate is events / the job's wall time from submission to its end (Flink's own start,
planning and code generation included, as Wayline's rate includes its first micro-batch);
``net_rate`` also takes away the same job's time over an empty topic (its fixed cost),
which is what Wayline's rate without the first micro-batch compares with.

Run (normally through bench/rules.py): bench/results/flink-venv/bin/python bench/rules_flink.py
  --bootstrap HOST:PORT --topic TOPIC --empty-topic TOPIC --events N --config 70,20,10 [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment

from toolkit import cli  # stdlib only: this runs in the Flink virtualenv, without Wayline

REPO = Path(__file__).resolve().parents[1]
# The allowed lateness of Wayline's watermark (rules.allowed_lateness_s), passed by bench/rules.py.
DEFAULT_LATENESS_S = 10.0
# Rules per INSERT (a UNION ALL): keeps each statement's plan small at 1,000 rules; the
# statement set still reads the one source once for all of them.
RULES_PER_INSERT = 50


def source_ddl(name: str, topic: str, bootstrap: str, lateness_s: float) -> str:
    # ``time`` is Python's isoformat with an offset ("...T00:00:00.06+00:00"): cut at the
    # offset (always +00:00 here) and cast, which takes any number of fractional digits.
    return f"""
        CREATE TABLE {name} (
            id STRING, source STRING, type STRING, tenantid STRING, `time` STRING,
            data ROW<`user` STRING, price INT, amount INT>,
            event_time AS CAST(REPLACE(SUBSTRING(`time` FROM 1 FOR POSITION('+' IN `time`) - 1), 'T', ' ')
                               AS TIMESTAMP(3)),
            WATERMARK FOR event_time AS event_time - INTERVAL '{lateness_s:.3f}' SECOND
        ) WITH (
            'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
            'properties.group.id' = 'bench-flink', 'scan.startup.mode' = 'earliest-offset',
            'scan.bounded.mode' = 'latest-offset', 'format' = 'json', 'json.ignore-parse-errors' = 'true'
        )"""


def sink_ddl(bootstrap: str, topic: str) -> str:
    return f"""
        CREATE TABLE outputs (rule STRING, k STRING, v STRING) WITH (
            'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
            'key.format' = 'raw', 'key.fields' = 'k', 'value.format' = 'json', 'value.fields-include' = 'ALL'
        )"""


def output_topic(prefix: str, mix: tuple[int, ...]) -> str:
    return f"{prefix}.{'-'.join(map(str, mix))}"


def filters(count: int) -> list[str]:
    out = []
    for i in range(count):
        if i % 2:
            out.append(f"SELECT 'f{i}', `user`, JSON_OBJECT('id' VALUE id, 'user' VALUE `user`, 'amount' VALUE amount) "
                       f"FROM flat WHERE type = 'bench.order' AND amount > {900 + i}")
        else:
            out.append(f"SELECT 'f{i}', id, JSON_OBJECT('id' VALUE id, 'tenantid' VALUE tenantid) "
                       f"FROM flat WHERE type = 'bench.price' AND price < {i % 7}")
    return out


def windows(count: int) -> list[str]:
    return [f"SELECT 'w{i}', `user`, JSON_OBJECT('user' VALUE `user`, 'start' VALUE CAST(window_start AS STRING), "
            f"'n' VALUE COUNT(*), 'total' VALUE SUM(amount)) "
            f"FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(event_time), INTERVAL '1' MINUTE)) "
            f"GROUP BY `user`, window_start, window_end HAVING SUM(amount) > {1500 + i}" for i in range(count)]


PATTERNS = [
    """SELECT 'p{i}', `user`, JSON_OBJECT('user' VALUE `user`, 'failures' VALUE failures) FROM flat MATCH_RECOGNIZE (
       PARTITION BY `user` ORDER BY event_time MEASURES COUNT(F.id) AS failures
       ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW PATTERN (F{{3,}} S) WITHIN INTERVAL '5' MINUTE
       DEFINE F AS F.type = 'bench.login.failed', S AS S.type = 'bench.login.ok' AND {i} >= 0)""",
    """SELECT 'p{i}', `user`, JSON_OBJECT('user' VALUE `user`, 'top' VALUE top, 'back' VALUE back) FROM flat MATCH_RECOGNIZE (
       PARTITION BY `user` ORDER BY event_time MEASURES FIRST(A.price) AS top, LAST(C.price) AS back
       ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) WITHIN INTERVAL '5' MINUTE
       DEFINE A AS A.type = 'bench.price', B AS B.type = 'bench.price' AND price < PREV(price) - {i},
              C AS C.type = 'bench.price' AND price > PREV(price))""",
]


def patterns(count: int) -> list[str]:
    return [PATTERNS[i % len(PATTERNS)].format(i=i) for i in range(count)]


def run_job(topic: str, args: argparse.Namespace, mix: tuple[int, int, int]) -> float:
    """One job over ``topic`` from start to end: its wall time in seconds."""
    settings = EnvironmentSettings.in_streaming_mode()
    env = TableEnvironment.create(settings)
    conf = env.get_config()
    conf.set("parallelism.default", "2")
    conf.set("pipeline.jars", ";".join(p.resolve().as_uri() for p in sorted((REPO / "jars" / "flink").glob("*.jar"))))
    conf.set("table.exec.source.idle-timeout", "1 s")
    # 1,000 rules are hundreds of operators and channels: the mini-cluster's default 64 MB
    # of network buffers ran out ("Insufficient number of network buffers") before any event.
    conf.set("taskmanager.memory.network.min", "512mb")
    conf.set("taskmanager.memory.network.max", "512mb")
    env.execute_sql(source_ddl("events", topic, args.bootstrap, args.lateness_s))
    env.execute_sql(sink_ddl(args.bootstrap, output_topic(args.output_topic, mix)))
    env.execute_sql("CREATE TEMPORARY VIEW flat AS SELECT id, type, tenantid, data.`user` AS `user`, "
                    "data.price AS price, data.amount AS amount, event_time FROM events")
    env.execute_sql("CREATE TEMPORARY VIEW orders AS SELECT * FROM flat WHERE type = 'bench.order'")
    rules = filters(mix[0]) + windows(mix[1]) + patterns(mix[2])
    statements = env.create_statement_set()
    if not rules:
        # No rules: read and parse every event, write nothing (Wayline's baseline).
        env.execute_sql("CREATE TABLE nothing (id STRING, `user` STRING) WITH ('connector' = 'blackhole')")
        statements.add_insert_sql("INSERT INTO nothing SELECT id, data.`user` FROM events")
    for start in range(0, len(rules), RULES_PER_INSERT):
        statements.add_insert_sql("INSERT INTO outputs " + " UNION ALL ".join(rules[start:start + RULES_PER_INSERT]))
    started = time.perf_counter()
    statements.execute().wait()
    return time.perf_counter() - started


def main() -> None:
    # Its figures go to bench/rules.py as lines on stdout, which writes them in its results.
    parser = cli.parser(__doc__, runs=3, out=None)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--empty-topic", required=True, help="a topic with no events: the job's fixed cost")
    parser.add_argument("--output-topic", default="bench.rules.flink.out",
                        help="each configuration writes to this topic with its mix appended (filters-windows-patterns)")
    parser.add_argument("--events", type=int, required=True, help="how many events the topic holds")
    parser.add_argument("--config", action="append", required=True, help="filters,windows,patterns")
    parser.add_argument("--lateness-s", type=float, default=DEFAULT_LATENESS_S)
    args = parser.parse_args()
    mixes = {config: tuple(int(n) for n in config.split(",")) for config in args.config}
    # The JVM's first job also loads and compiles the planner: a warm-up, not counted.
    run_job(args.empty_topic, args, mixes[args.config[0]])
    for config, mix in mixes.items():
        walls = [run_job(args.topic, args, mix) for _ in range(args.runs)]
        empty = run_job(args.empty_topic, args, mix)
        rates = [args.events / wall for wall in walls]
        net = [args.events / max(wall - empty, 1e-3) for wall in walls]
        print(json.dumps({"config": config, "walls": walls, "empty_wall": empty, "rates": rates,
                          "median_rate": statistics.median(rates), "net_rates": net,
                          "median_net_rate": statistics.median(net)}), flush=True)


if __name__ == "__main__":
    main()
