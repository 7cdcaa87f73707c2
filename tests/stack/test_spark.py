"""Where Spark's connector jars are found, and what a missing folder says."""

import pytest

from tests.conftest import REPO
from wayline.core.errors import MissingJarsError
from wayline.core.settings import Settings
from wayline.stack.spark import connector_jars


def test_the_connector_jars_are_the_checkouts_from_any_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    jars_dir = Settings().spark.jars_dir
    assert jars_dir == REPO / "jars" / "spark"
    assert any(jar.name.startswith("spark-sql-kafka") for jar in connector_jars(jars_dir))


def test_missing_connector_jars_name_the_setting(tmp_path) -> None:
    with pytest.raises(MissingJarsError, match=r"make jars.*WAYLINE_SPARK__JARS_DIR"):
        connector_jars(tmp_path)


@pytest.mark.integration
def test_variable_references_stay_literal_in_wayline_s_session(spark) -> None:
    """Spark substitutes ${env:…}, ${system:…} and ${spark.…} in SQL text, literals included,
    unless told not to: rule SQL must never read the job's environment or settings."""
    from pyspark.sql import functions as F

    literal = "${env:HOME}"
    assert spark.sql(f"SELECT '{literal}' AS x").first()["x"] == literal
    assert spark.range(1).select(F.expr("'${system:user.home}'").alias("x")).first()["x"] == "${system:user.home}"
