"""Memory and CPU of process trees, read from ``/proc`` and sampled on a thread."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple, Self

SAMPLE_S = 0.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Process(NamedTuple):
    parent: int
    resident_mb: float
    peak_mb: float
    """The kernel's high-water mark of its resident memory."""
    command: bytes
    """Its command line, NUL-separated."""


def processes() -> dict[int, Process]:
    """Every process readable now, by pid."""
    found: dict[int, Process] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
            command = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        resident_kb = int(fields.get("VmRSS", "0 kB").split()[0])
        peak_kb = int(fields.get("VmHWM", "0 kB").split()[0])
        found[int(name)] = Process(int(fields["PPid"]), resident_kb / 1024, peak_kb / 1024, command)
    return found


def descendants(found: dict[int, Process], roots: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, process in found.items():
        children.setdefault(process.parent, []).append(pid)
    below, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            below.append(child)
            todo.append(child)
    return below


def spark_jvms(found: dict[int, Process]) -> list[int]:
    """This process's Spark driver JVMs (its SparkSubmit children)."""
    return [pid for pid, p in found.items() if p.parent == os.getpid() and b"SparkSubmit" in p.command]


def cpu_of(pid: int) -> float | None:
    """User and system CPU seconds ``pid`` used so far (every thread); None once it is gone."""
    try:
        # Fields after the command (which may hold spaces): utime, stime are the 14th, 15th.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def roles(found: dict[int, Process], pids: list[int]) -> dict[str, list[int]]:
    """``pids`` and every descendant alive now, per role: ``<command>:<kind>``, the command a
    root runs (``wayline run delivery``'s "delivery") and the kind of process (its Python
    ``driver``, its ``jvm``, the JVM's Python ``workers``, and the driver's other children:
    its ``intake`` processes and its ``senders``)."""
    found_roles: dict[str, list[int]] = {}
    for root in (pid for pid in pids if pid in found):
        command = found[root].command.rstrip(b"\0").rsplit(b"\0", 1)[-1].decode(errors="replace")
        for pid in [root, *descendants(found, [root])]:
            found_roles.setdefault(f"{command}:{_kind(found, pid, root)}", []).append(pid)
    return found_roles


def cpu_seconds(pids: list[int]) -> dict[str, float]:
    """User and system CPU seconds used so far by ``pids`` and every descendant alive now,
    per role (:func:`roles`)."""
    return {role: sum(cpu_of(pid) or 0.0 for pid in members) for role, members in roles(processes(), pids).items()}


def _kind(found: dict[int, Process], pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    if b"java" in found[pid].command.split(b"\0", 1)[0]:
        return "jvm"
    parent = found[pid].parent
    while parent != root and parent in found:
        if b"java" in found[parent].command.split(b"\0", 1)[0]:
            return "workers"
        parent = found[parent].parent
    return "intake" if b"\0intake\0" in found[pid].command else "senders"


class Sampler:
    """Calls :meth:`sample` every ``every_s`` on a thread of its own, inside a ``with``
    block, until the block ends or ``sample`` returns False."""

    def __init__(self, every_s: float) -> None:
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s) and self.sample() is not False:
            pass

    def sample(self) -> bool | None:
        raise NotImplementedError


class MemorySampler(Sampler):
    """Peak resident memory, sampled every ``SAMPLE_S``: the Spark JVM (this process's
    SparkSubmit child), its Python workers together, and a system's own processes with their
    descendants (the plain sender; `wayline run delivery` with its JVM and sender processes,
    and `wayline run retries` with its JVM)."""

    def __init__(self, pids: list[int] = ()) -> None:
        super().__init__(SAMPLE_S)
        self._pids = list(pids)
        self.peaks_mb = {"jvm": 0.0, "python_workers": 0.0, "process": 0.0}
        self.peaks_by_role_mb: dict[str, float] = {}
        """The system's own processes, per role (:func:`roles`): each role's own peak, so they
        need not add up to the ``process`` peak, which is of their sum at one sample."""

    def sample(self) -> None:
        found = processes()
        jvms = spark_jvms(found)
        workers = [p for p in descendants(found, jvms) if b"python" in found[p].command]
        now = {"jvm": sum(found[p].resident_mb for p in jvms),
               "python_workers": sum(found[p].resident_mb for p in workers),
               "process": sum(found[p].resident_mb for p in self._tree(found))}
        self.peaks_mb = {k: max(v, now[k]) for k, v in self.peaks_mb.items()}
        for role, members in roles(found, self._pids).items():
            resident = sum(found[p].resident_mb for p in members)
            self.peaks_by_role_mb[role] = max(self.peaks_by_role_mb.get(role, 0.0), resident)

    def _tree(self, found: dict[int, Process]) -> list[int]:
        roots = [pid for pid in self._pids if pid in found]
        return [*roots, *descendants(found, roots)]


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent not idle since boot (``/proc/stat``)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


class CpuTimeline(Sampler):
    """The CPU seconds ``pids`` (per role, :func:`roles`) and the whole machine have used,
    sampled every second, so that a run's phases (its start, its drain) can be told apart."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(1.0)
        self._pids = list(pids)
        self.samples: list[tuple[float, dict[str, float], float]] = []

    def sample(self) -> None:
        self.samples.append((time.time(), cpu_seconds(self._pids), machine_busy_s()))

    def between(self, start: float, end: float) -> dict[str, Any]:
        """CPU seconds per role and of the machine between the samples nearest ``start`` and ``end``."""
        first = min(self.samples, key=lambda s: abs(s[0] - start))
        last = min(self.samples, key=lambda s: abs(s[0] - end))
        return {"seconds": round(last[0] - first[0], 1),
                "cpu_s_by_role": {role: round(used - first[1].get(role, 0.0), 2) for role, used in last[1].items()},
                "machine_busy_s": round(last[2] - first[2], 2)}
