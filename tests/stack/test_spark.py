"""Where Spark's connector jars are found, and what a missing folder says."""

import pytest

from tests.conftest import REPO
from wayline.core.errors import MissingJarsError
from wayline.core.settings import Settings
from wayline.stack.spark import WORKER_DAEMON, connector_jars


def test_the_connector_jars_are_the_checkouts_from_any_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    jars_dir = Settings().spark.jars_dir
    assert jars_dir == REPO / "jars" / "spark"
    names = [jar.name for jar in connector_jars(jars_dir)]
    assert any(name.startswith("spark-sql-kafka") for name in names) and "wayline-spark.jar" in names


def test_missing_connector_jars_name_the_setting(tmp_path) -> None:
    with pytest.raises(MissingJarsError, match=r"Kafka connector.*make jars.*WAYLINE_SPARK__JARS_DIR"):
        connector_jars(tmp_path)
    # The connectors without Wayline's own jar, as a checkout from before it had one.
    (tmp_path / "spark-sql-kafka-0-10_2.13-4.2.0.jar").touch()
    with pytest.raises(MissingJarsError, match=r"no wayline-spark.jar .*make jars"):
        connector_jars(tmp_path)


def _worker_facts(frames):
    """In a Python worker: the daemon it was forked from, and whether the rules job's module
    was there before this task's own imports (this test module does not import it)."""
    import sys

    import pandas as pd

    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    for _ in frames:
        yield pd.DataFrame({"daemon": [spec.name if spec is not None else ""],
                            "rules_loaded": ["wayline.pipelines.rules_processor" in sys.modules]})


@pytest.mark.integration
def test_python_workers_fork_from_a_daemon_that_imported_the_rules_modules(spark) -> None:
    """A worker started for a task has the rules job's modules without importing them
    (docs/benchmarks.md: the imports were half of the workers' time at 10 rules)."""
    facts = (spark.range(2, numPartitions=2)
             .mapInPandas(_worker_facts, "daemon string, rules_loaded boolean").collect())
    assert {(row.daemon, row.rules_loaded) for row in facts} == {(WORKER_DAEMON, True)}


@pytest.mark.integration
def test_variable_references_stay_literal_in_wayline_s_session(spark) -> None:
    """Spark substitutes ${env:…}, ${system:…} and ${spark.…} in SQL text, literals included,
    unless told not to: rule SQL must never read the job's environment or settings."""
    from pyspark.sql import functions as F

    literal = "${env:HOME}"
    assert spark.sql(f"SELECT '{literal}' AS x").first()["x"] == literal
    assert spark.range(1).select(F.expr("'${system:user.home}'").alias("x")).first()["x"] == "${system:user.home}"
