"""The local PostgreSQL starts wherever the state dir is, keeps its data across restarts,
and leaves no process behind."""

import os
import stat
import tempfile
from pathlib import Path

import psutil
import psycopg
import pytest

from wayline.core.errors import StackError
from wayline.core.settings import Settings
from wayline.stack.postgres import SERVICE_USER, postgres_files, start_postgres, stop_postgres

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def server_processes(pgdata: Path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if any(str(pgdata) in part for part in p.info["cmdline"] or ())]


@pytest.fixture
def private_folder(tmp_path) -> Path:
    """A fresh folder only root may enter, as `mktemp -d` makes (and as root's home is)."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    return folder


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as a separate system user")
def test_root_runs_postgres_for_a_state_dir_in_a_private_folder(private_folder: Path) -> None:
    settings = Settings(state_dir=private_folder / "state")
    files = postgres_files(settings)
    # The server's user reaches its binaries and data without anyone opening the private folder.
    assert files.account is not None and files.account.pw_name == SERVICE_USER
    assert not files.bin_dir.is_relative_to(private_folder) and not files.home.is_relative_to(private_folder)

    running = start_postgres(settings)
    try:
        assert psutil.Process(running.pid).username() == SERVICE_USER
        with psycopg.connect(running.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (note text)")
            conn.execute("INSERT INTO kept VALUES ('still here')")
    finally:
        stop_postgres(running.pid, settings)
    assert not psutil.pid_exists(running.pid)
    assert server_processes(files.pgdata) == []
    assert stat.S_IMODE(private_folder.stat().st_mode) == 0o700

    again = start_postgres(settings)
    try:
        with psycopg.connect(again.dsn) as conn:
            assert conn.execute("SELECT note FROM kept").fetchall() == [("still here",)]
    finally:
        stop_postgres(again.pid, settings)
    assert server_processes(files.pgdata) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as a separate system user")
def test_a_service_dir_out_of_the_service_users_reach_is_named(private_folder: Path) -> None:
    with pytest.raises(StackError, match="WAYLINE_STACK__SERVICE_DIR"):
        postgres_files(Settings(state_dir=private_folder / "state", stack={"service_dir": private_folder / "service"}))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as a separate system user")
def test_the_data_of_a_removed_state_dir_is_removed_at_the_next_start(tmp_path: Path) -> None:
    abandoned = postgres_files(Settings(state_dir=tmp_path / "gone")).home
    (tmp_path / "gone" / "postgres" / "instance").unlink()

    kept = postgres_files(Settings(state_dir=tmp_path / "kept")).home
    assert not abandoned.exists() and kept.is_dir() and kept.parent == abandoned.parent
    assert postgres_files(Settings(state_dir=tmp_path / "kept")).home == kept


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as a separate system user")
def test_a_state_dir_from_before_the_move_keeps_its_data(tmp_path: Path) -> None:
    legacy = tmp_path / "state" / "postgres" / "data"
    legacy.mkdir(parents=True)
    (legacy / "PG_VERSION").write_text("18\n")
    files = postgres_files(Settings(state_dir=tmp_path / "state"))
    assert (files.pgdata / "PG_VERSION").read_text() == "18\n" and not legacy.exists()
    assert files.pgdata.stat().st_uid == files.account.pw_uid == (files.pgdata / "PG_VERSION").stat().st_uid
