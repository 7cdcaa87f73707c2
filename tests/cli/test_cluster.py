"""`wayline cluster up / status / down`: a master and a worker started, shown, and stopped
with nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from wayline.cli.main import app
from wayline.core.settings import Settings
from wayline.stack import cluster


def invoke(state_dir: Path, *args: str):
    return CliRunner().invoke(app, ["cluster", *args], env={
        "WAYLINE_STATE_DIR": str(state_dir), "WAYLINE_CLUSTER__WORKERS": "1", "WAYLINE_CLUSTER__WORKER_MEMORY": "512m",
        "COLUMNS": "200"})


def test_status_without_a_cluster_says_how_to_start_one(tmp_path: Path) -> None:
    result = invoke(tmp_path, "status")
    assert result.exit_code == 1
    assert "wayline cluster up" in result.output


def test_an_unreadable_state_file_names_itself(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text("{not json")
    result = invoke(tmp_path, "status")
    assert result.exit_code == 1
    assert "cluster.json is unreadable" in result.output


@pytest.mark.integration
@pytest.mark.slow
def test_up_status_down_leaves_no_process(tmp_path: Path) -> None:
    started = invoke(tmp_path, "up")
    try:
        assert started.exit_code == 0, started.output
        state = cluster.read_state(Settings(state_dir=tmp_path))
        assert state is not None and state.master_url.startswith("spark://127.0.0.1:")
        assert len(state.worker_pids) == 1 and all(state.alive.values())
        status = invoke(tmp_path, "status")
        assert status.exit_code == 0, status.output
        assert "1 workers registered, 1 cores, 0 applications running" in status.output
        assert state.master_url in status.output
    finally:
        stopped = invoke(tmp_path, "down")
    assert stopped.exit_code == 0, stopped.output
    assert not any(state.alive.values())
    assert [pid for pid in [state.master_pid, *state.worker_pids] if cluster.group_members(pid)] == []
    assert invoke(tmp_path, "status").exit_code == 1
