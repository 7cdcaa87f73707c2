"""A Spark standalone cluster per module, for the jobs that run on one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO
from wayline.core.settings import Settings
from wayline.stack import cluster


@pytest.fixture(scope="module")
def local_cluster(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, cluster.ClusterState]]:
    """Two workers of one core; the job's own state dir holds the cluster's state, logs and checkpoints."""
    on_cluster = settings.model_copy(update={
        "state_dir": tmp_path_factory.mktemp("cluster-state"),
        "cluster": settings.cluster.model_copy(update={"workers": 2, "worker_cores": 1, "worker_memory": "768m"}),
    })
    state = cluster.up(on_cluster)
    try:
        yield on_cluster, state
    finally:
        cluster.down(on_cluster)
    # Nothing the cluster started outlives `down`: no daemon, no executor, no Python worker.
    assert [pid for pid in [state.master_pid, *state.worker_pids] if cluster.group_members(pid)] == []


def start_on_cluster(job: str, job_settings: Settings, master: str, stack_settings: Settings, log: Path,
                     environment: dict[str, str]) -> subprocess.Popen[bytes]:
    """`wayline run --master MASTER JOB`, as it would run beside a cluster (``start_detached``)."""
    return start_detached(job, job_settings, stack_settings, log, environment, master)


def start_detached(job: str, job_settings: Settings, stack_settings: Settings, log: Path,
                   environment: dict[str, str], master: str | None = None) -> subprocess.Popen[bytes]:
    """`wayline run [--master MASTER] JOB` as its own process group (``kill_hard`` ends it
    all): the broker, database and encryption key come from settings (the job's state dir
    has no stack file), the checkpoints from its own state dir."""
    settings_from_stack = {
        "WAYLINE_STATE_DIR": str(job_settings.state_dir),
        "WAYLINE_SPARK__JARS_DIR": str(REPO / "jars" / "spark"),
        "WAYLINE_SPARK__EXTRA_CONF": orjson.dumps({"spark.executor.memory": "512m"}).decode(),
        "WAYLINE_KAFKA__BOOTSTRAP_SERVERS": stack_settings.kafka_bootstrap(),
        "WAYLINE_POSTGRES__DSN": stack_settings.postgres_dsn(),
        # The tests' receivers are on the loopback, which endpoint URLs may not name unless allowed.
        "WAYLINE_REGISTRY__URL_ALLOW_LIST": orjson.dumps(stack_settings.registry.url_allow_list).decode(),
        "COLUMNS": "120",
    }
    key = stack_settings.state_dir / "encryption.key"
    if key.exists():  # made when the stack first stored a secret; a job without secrets needs none
        settings_from_stack["WAYLINE_REGISTRY__ENCRYPTION_KEYS"] = orjson.dumps([key.read_text().strip()]).decode()
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "wayline.cli.main", "run", *(["--master", master] if master else []), job],
            env=os.environ | settings_from_stack | environment,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
