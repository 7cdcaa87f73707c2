"""`wayline up / status / down` start a real stack, report it, and leave no process behind."""

import socket

import psutil
import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from wayline.cli.main import app
from wayline.core.settings import Settings
from wayline.stack.local import read_state
from wayline.stack.postgres import postgres_files

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def processes_using(path: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(path in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


def answers(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) == 0


def test_up_status_down_through_the_cli(tmp_path) -> None:
    env = {
        "WAYLINE_STATE_DIR": str(tmp_path),
        "WAYLINE_STACK__BROKER_JARS_DIR": str(REPO / "jars" / "broker"),
    }
    runner = CliRunner()

    started = runner.invoke(app, ["up"], env=env)
    assert started.exit_code == 0, started.output
    state = read_state(Settings(state_dir=tmp_path))
    assert state is not None and state.alive == {"kafka": True, "postgres": True}
    assert state.kafka_bootstrap in started.output
    assert answers(state.kafka_bootstrap)
    assert answers(state.postgres_dsn.split("@")[1].split("/")[0])

    status = runner.invoke(app, ["status"], env=env)
    assert status.exit_code == 0 and state.kafka_bootstrap in status.output

    again = runner.invoke(app, ["up"], env=env)  # idempotent: the same stack, not a second one
    assert again.exit_code == 0 and read_state(Settings(state_dir=tmp_path)) == state

    stopped = runner.invoke(app, ["down"], env=env)
    assert stopped.exit_code == 0, stopped.output
    assert not psutil.pid_exists(state.kafka_pid) and not psutil.pid_exists(state.postgres_pid)
    assert processes_using(str(tmp_path)) == []
    assert processes_using(str(postgres_files(Settings(state_dir=tmp_path)).pgdata)) == []
    assert runner.invoke(app, ["status"], env=env).exit_code == 1


def test_a_stack_that_cannot_start_says_why(tmp_path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["up"], env={
        "WAYLINE_STATE_DIR": str(tmp_path), "WAYLINE_STACK__BROKER_JARS_DIR": str(tmp_path / "no-jars"),
    })
    assert result.exit_code == 1
    message = " ".join(result.output.split())  # unwrap Rich's line breaks
    assert "run `make jars`" in message and "WAYLINE_STACK__BROKER_JARS_DIR" in message
    assert processes_using(str(tmp_path)) == []
