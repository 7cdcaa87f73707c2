"""The stack a benchmark runs on: its own Kafka and PostgreSQL in a fresh state folder, the
registry schema migrated; and ``wayline`` commands in processes of their own, as an
operator starts them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wayline.core.settings import Settings
from wayline.registry.db import Database, make_engine, migrate
from wayline.stack import local

LOOPBACK = ["127.0.0.1/32"]
"""``registry.url_allow_list`` for receivers on this machine, which the transport refuses
unless allowed."""


@contextmanager
def fresh_stack(state: Path, **overrides: Any) -> Iterator[tuple[Settings, Database]]:
    """Kafka and PostgreSQL under ``state`` (emptied first), stopped on the way out."""
    shutil.rmtree(state, ignore_errors=True)
    settings = Settings(state_dir=state, **overrides)
    local.up(settings)
    engine = make_engine(settings.postgres_dsn())
    try:
        migrate(engine)
        yield settings, Database(engine)
    finally:
        engine.dispose()
        local.down(settings)


def wayline(*argv: str, env: Mapping[str, str], log: Path | None = None, group: bool = False
            ) -> subprocess.Popen[bytes]:
    """``wayline <argv>`` with this environment and ``env`` over it, its output appended to
    ``log`` (default: nowhere); with ``group``, as the leader of a process group of its own,
    so that one signal reaches its JVM and workers too (:func:`stop`)."""
    output = log.open("ab") if log is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen([sys.executable, "-m", "wayline.cli.main", *argv], env={**os.environ, **env},
                                stdout=output, stderr=subprocess.STDOUT, start_new_session=group)
    finally:
        if log is not None:
            output.close()  # the child has its own copy


def stop(process: subprocess.Popen[bytes], *, how: signal.Signals = signal.SIGINT, group: bool = False,
         timeout_s: float = 60) -> None:
    """``how`` to ``process`` (its whole group with ``group``), then SIGKILL if it has not
    ended within ``timeout_s``."""
    send = (lambda sig: os.killpg(process.pid, sig)) if group else process.send_signal
    send(how)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait()
