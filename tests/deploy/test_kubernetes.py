"""The Kubernetes example in deploy/kubernetes/ is valid, and gives each job the settings it needs.

Built-in kinds are checked against the Kubernetes API's own JSON schemas, which the
`kubernetes-validate` package ships (no network). The Spark operator's SparkApplication is
a custom resource whose schema is not available offline: it is checked against
sparkapplication.schema.json beside this file, written for the fields the example uses.
The settings the manifests give the driver are then loaded as Wayline's own Settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO
from wayline.core.settings import Settings
from wayline.stack.shipping import check_checkpoints

DEPLOY = REPO / "deploy" / "kubernetes"
SPARK_APPLICATION = json.loads((Path(__file__).parent / "sparkapplication.schema.json").read_text())
JOBS = {"wayline-delivery": "delivery", "wayline-rules": "rules"}
PROCESSES = {"wayline-retries": "retries"}
"""Commands that run no Spark: a Deployment each, the settings in the same ConfigMap and Secret."""


def documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(DEPLOY.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents() if doc["kind"] == kind}


def validate(document: dict[str, Any]) -> None:
    if document["kind"] == "SparkApplication":
        jsonschema.validate(document, SPARK_APPLICATION)
    else:
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("document", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_matches_its_schema(document: dict[str, Any]) -> None:
    validate(document)


@pytest.mark.parametrize("broken", [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dat": {}},
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": 7}},
])
def test_the_kubernetes_schemas_catch_a_mistake(broken: dict[str, Any]) -> None:
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


@pytest.mark.parametrize("mistake", [
    {"driver": {"cores": 1, "memory": "4g", "serviceAcount": "wayline-spark"}},
    {"executor": {"instances": 2, "cores": 1, "memory": "8 GB"}},
    {"mainApplicationFile": "/opt/main.py"},
])
def test_the_sparkapplication_schema_catches_a_mistake(mistake: dict[str, Any]) -> None:
    application = by_kind("SparkApplication")["wayline-delivery"]
    broken = application | {"spec": application["spec"] | mistake}
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_each_job_runs_its_own_command_with_the_service_account_that_may_start_executors() -> None:
    applications = by_kind("SparkApplication")
    assert set(applications) == set(JOBS)
    accounts = by_kind("ServiceAccount")
    [binding] = by_kind("RoleBinding").values()
    for name, job in JOBS.items():
        spec = applications[name]["spec"]
        assert spec["arguments"] == ["run", job]
        assert spec["driver"]["serviceAccount"] in accounts
        assert {"kind": "ServiceAccount", "name": spec["driver"]["serviceAccount"], "namespace": "wayline"} \
            in binding["subjects"]
        # Executors get neither the settings nor the secrets: the driver hands tasks what they need.
        assert "envFrom" not in spec["executor"] and "env" not in spec["executor"]


def test_each_plain_process_runs_its_command_from_the_same_image() -> None:
    deployments = by_kind("Deployment")
    assert set(deployments) == set(PROCESSES)
    images = {app["spec"]["image"] for app in by_kind("SparkApplication").values()}
    for name, command in PROCESSES.items():
        [container] = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["/opt/venv/bin/wayline", "run", command]
        assert container["image"] in images


def process_spec(name: str) -> dict[str, Any]:
    """The driver of a Spark job, or the container of a plain process."""
    if name in JOBS:
        return by_kind("SparkApplication")[name]["spec"]["driver"]
    [container] = by_kind("Deployment")[name]["spec"]["template"]["spec"]["containers"]
    return container


def driver_environment(name: str) -> dict[str, str]:
    spec = process_spec(name)
    config_maps, secrets = by_kind("ConfigMap"), by_kind("Secret")
    environment: dict[str, str] = {}
    for source in spec["envFrom"]:
        if "configMapRef" in source:
            environment |= config_maps[source["configMapRef"]["name"]]["data"]
        else:
            environment |= secrets[source["secretRef"]["name"]]["stringData"]
    return environment | {item["name"]: item["value"] for item in spec.get("env", [])}


@pytest.mark.parametrize("name", sorted(JOBS | PROCESSES))
def test_the_drivers_settings_load_and_name_everything_a_cluster_run_needs(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in [v for v in os.environ if v.startswith("WAYLINE_")]:
        monkeypatch.delenv(variable)
    for variable, value in driver_environment(name).items():
        monkeypatch.setenv(variable, value)
    settings = Settings()
    # Addresses from the settings, never from a local stack file (there is none in a pod).
    assert settings.kafka_bootstrap() and settings.postgres_dsn().startswith("postgresql://")
    assert settings.registry.encryption_keys
    assert settings.spark.master.startswith("k8s://")
    assert settings.state_dir.is_absolute()
    check_checkpoints(settings)  # on the shared store that fs.defaultFS names


def test_the_applications_name_the_spark_wayline_runs_on() -> None:
    import pyspark

    assert {app["spec"]["sparkVersion"] for app in by_kind("SparkApplication").values()} == {pyspark.__version__}
