"""What the delivery runtime's long-lived processes (sender and intake processes) share:
started beside ``wayline run delivery`` and stopped with it, and a consumer taken back to
its last commit when the work it fetched could not be finished."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

_log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 1.0
"""How often an intake or sender process commits its consumed offsets at most (and when
partitions leave it, and when it stops). A commit per batch was a write to the group's
offsets dozens of times a second, for nearly every one of 500 source partitions in the
intake's case, on the broker every hop of the path waits on. What was done but not
committed is read again after a crash: copied again by the intake, skipped by the sender
processes' ``settled`` check where its outcome was recorded (docs/benchmarks.md,
"Commits once a second")."""

STOP_GRACE_S = 30.0
"""How long :func:`running_processes` lets a process finish what it does before killing it."""


def runtime_command(*args: str) -> tuple[str, ...]:
    """``wayline run ARGS`` run by this interpreter, through the runtime processes' own entry
    point (:mod:`wayline.cli.runtime`: it loads only what they run)."""
    return (sys.executable, "-m", "wayline.cli.runtime", *args)


@contextmanager
def running_processes(command: Sequence[str], count: int, what: str) -> Iterator[list[int]]:
    """``count`` processes of ``command`` (which takes ``--parent``), with this process's
    environment; yields their pids. Their output goes where this process's standard error
    goes (a job's log while a live view has the terminal). On the way out each gets
    SIGTERM (it finishes what it is doing, commits and exits), then SIGKILL after
    :data:`STOP_GRACE_S`. ``what`` names them in the log."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            # Told our pid, a process stops once it is orphaned: a job killed with -9 leaves none behind.
            processes.append(subprocess.Popen([*command, "--parent", str(os.getpid())], stdout=sys.stderr.fileno()))
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _log.warning("%s process %d did not stop within %g s: killed", what, process.pid, STOP_GRACE_S)
                process.kill()
                process.wait()


def seek_to_committed(consumer: Consumer, what: str) -> None:
    """Take every partition ``consumer`` holds again from its last commit (the beginning
    where there is none): what was fetched since is read again."""
    try:
        for tp in consumer.committed(consumer.assignment(), timeout=10):
            consumer.seek(tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))
    except KafkaException as exc:  # revoked meanwhile: its next owner starts from the last commit
        _log.warning("could not rewind %s: %s", what, exc)


__all__ = ["COMMIT_INTERVAL_S", "STOP_GRACE_S", "running_processes", "runtime_command", "seek_to_committed"]
