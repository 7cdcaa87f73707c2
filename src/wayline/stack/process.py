"""Starting and stopping the stack's server processes, always by their own pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from wayline.core.errors import StackError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def is_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by us) still answers kill(0); ask waitpid too.
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return reaped == 0


def spawn(command: Sequence[str], log_file: Path, env: dict[str, str] | None = None) -> int:
    """Start a server in its own session, so a Ctrl-C in the terminal reaches only us."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    return process.pid


def wait_until(ready: Callable[[], bool], *, timeout_s: float, pid: int, what: str, log_file: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            raise StackError(f"{what} exited during start-up; last log lines:\n{tail(log_file)}")
        if ready():
            return
        time.sleep(0.5)
    raise StackError(f"{what} was not ready after {timeout_s:.0f} s; last log lines:\n{tail(log_file)}")


def stop_pid(pid: int, *, timeout_s: float, first: signal.Signals = signal.SIGTERM) -> None:
    """``first`` (SIGTERM), wait, then SIGKILL: a server that will not stop is still stopped."""
    if not is_alive(pid):
        return
    os.kill(pid, first)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_alive(pid):
        raise StackError(f"process {pid} survived SIGKILL")


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"


__all__ = ["free_port", "is_alive", "spawn", "stop_pid", "tail", "wait_until"]
