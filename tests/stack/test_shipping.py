"""What a session on a non-local master ships to its executors, and the driver-local
checkpoint path it refuses."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from wayline.core.errors import ConfigError
from wayline.core.settings import Settings
from wayline.stack.shipping import check_checkpoints, package_zip
from wayline.stack.spark import spark_conf

REMOTE = "spark://spark-master.internal:7077"


def settings_for(tmp_path: Path, master: str, **spark: object) -> Settings:
    return Settings(state_dir=tmp_path, spark={"master": master, "jars_dir": REPO / "jars" / "spark", **spark})


@pytest.mark.parametrize("master", ["local[2]", "local[*]", "local-cluster[2,1,1024]", "spark://127.0.0.1:7077",
                                    "spark://localhost:7077"])
def test_a_master_on_this_machine_sees_the_drivers_checkpoints(tmp_path: Path, master: str) -> None:
    check_checkpoints(settings_for(tmp_path, master))


def test_a_driver_local_checkpoint_path_on_a_remote_master_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"driver's local disk.*SHARED_CHECKPOINTS.*fs\.defaultFS") as raised:
        check_checkpoints(settings_for(tmp_path, REMOTE))
    assert str((tmp_path / "checkpoints").resolve()) in str(raised.value)
    # Also at session start: no session is built on such a path.
    with pytest.raises(ConfigError):
        spark_conf(settings_for(tmp_path, REMOTE))


def test_an_explicit_file_default_filesystem_is_still_driver_local(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        check_checkpoints(settings_for(tmp_path, REMOTE, extra_conf={"spark.hadoop.fs.defaultFS": "file:///"}))


@pytest.mark.parametrize("accepted", [
    {"shared_checkpoints": True},
    {"extra_conf": {"spark.hadoop.fs.defaultFS": "s3a://wayline-checkpoints"}},
    {"extra_conf": {"spark.hadoop.fs.defaultFS": "hdfs://namenode:8020"}},
])
def test_shared_storage_is_accepted_on_a_remote_master(tmp_path: Path, accepted: dict) -> None:
    check_checkpoints(settings_for(tmp_path, REMOTE, **accepted))


def test_the_package_zip_holds_the_installed_package_without_bytecode(tmp_path: Path) -> None:
    zipped = package_zip(Settings(state_dir=tmp_path))
    names = zipfile.ZipFile(zipped).namelist()
    assert "wayline/__init__.py" in names
    assert "wayline/pipelines/delivery.py" in names
    assert "wayline/registry/migrations/env.py" in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_a_cluster_session_ships_the_package_and_names_the_python(tmp_path: Path) -> None:
    conf = spark_conf(settings_for(tmp_path, REMOTE, shared_checkpoints=True))
    assert conf["spark.submit.pyFiles"] == str((tmp_path / "dist" / "wayline.zip").resolve())
    assert conf["spark.pyspark.python"] == sys.executable
    # Executors elsewhere must reach the driver: it is not held to the loopback.
    assert "spark.driver.bindAddress" not in conf
    without = spark_conf(settings_for(tmp_path, REMOTE, shared_checkpoints=True, ship_package=False))
    assert "spark.submit.pyFiles" not in without


def test_the_local_cluster_keeps_the_driver_on_the_loopback(tmp_path: Path) -> None:
    conf = spark_conf(settings_for(tmp_path, "spark://127.0.0.1:7077"))
    assert conf["spark.driver.bindAddress"] == conf["spark.driver.host"] == "127.0.0.1"
    assert "spark.submit.pyFiles" in conf


def test_local_mode_ships_nothing(tmp_path: Path) -> None:
    conf = spark_conf(settings_for(tmp_path, "local[2]"))
    assert "spark.submit.pyFiles" not in conf and "spark.pyspark.python" not in conf
