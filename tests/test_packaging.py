"""The pins that must agree across pyproject.toml, pom.xml and the installed packages."""

import importlib
import pkgutil
import re
import tomllib
import xml.etree.ElementTree as ET

import pyspark
import pytest

import wayline
from tests.conftest import REPO

POM = "{http://maven.apache.org/POM/4.0.0}"


def pom_property(name: str) -> str:
    root = ET.parse(REPO / "pom.xml").getroot()
    return root.find(f"{POM}properties/{POM}{name}").text  # type: ignore[union-attr]


def test_the_spark_runtime_is_the_pinned_pyspark() -> None:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in dependencies if d.startswith("pyspark=="))
    assert pin == f"pyspark=={pom_property('spark.runtime.version')}"
    assert pyspark.__version__ == pom_property("spark.runtime.version")


def test_the_kafka_broker_is_version_4() -> None:
    assert re.fullmatch(r"4\.\d+\.\d+", pom_property("kafka.version"))


def public_modules():
    for module in pkgutil.walk_packages(wayline.__path__, "wayline."):
        if not module.ispkg:
            yield module.name


@pytest.mark.parametrize("name", sorted(public_modules()))
def test_every_module_declares_its_public_names(name: str) -> None:
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    for exported in module.__all__:
        assert hasattr(module, exported), f"{name}.__all__ names {exported}, which it does not define"
