"""`wayline cluster up / down / status`: a Spark standalone cluster on this machine.

A master and ``cluster.workers`` workers, each its own JVM started from the classes of
the installed PySpark distribution, all on 127.0.0.1. Each worker offers
``cluster.worker_cores`` cores and ``cluster.worker_memory`` to executors, so a job on
``spark://…`` runs in separate executor processes, as on a real cluster. The pids, ports
and master URL are kept in ``state_dir/cluster.json`` beside the stack's file.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from wayline.core.errors import StackError
from wayline.core.settings import Settings
from wayline.stack.kafka import _java
from wayline.stack.logs import write_log4j2_config
from wayline.stack.process import free_port, is_alive, spawn, stop_pid, wait_until

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class ClusterState:
    master_url: str
    master_pid: int
    master_ui: str
    worker_pids: list[int] = field(default_factory=list)
    started_at: float = 0.0

    @property
    def alive(self) -> dict[str, bool]:
        return {"master": is_alive(self.master_pid)} | {
            f"worker {n}": is_alive(pid) for n, pid in enumerate(self.worker_pids, 1)
        }

    def overview(self, timeout_s: float = 2.0) -> dict:
        """The master's own account (its /json/ page): alive workers, cores, running apps."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=timeout_s) as answer:
                return dict(json.load(answer))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise StackError(f"the Spark master at {self.master_ui} does not answer ({exc})") from exc


def state_file(settings: Settings) -> Path:
    return settings.state_dir / "cluster.json"


def spark_home() -> Path:
    """The PySpark distribution: its jars/ are the cluster's classpath, and workers start
    executors from it (they need SPARK_HOME)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def read_state(settings: Settings) -> ClusterState | None:
    try:
        return ClusterState(**json.loads(state_file(settings).read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError) as exc:
        raise StackError(
            f"{state_file(settings)} is unreadable ({exc}); remove it and run `wayline cluster up`"
        ) from exc


def _environment(home: Path) -> dict[str, str]:
    # A worker builds each executor's command with Spark's launcher, which wants the Scala
    # version of a distribution without a RELEASE file (as PySpark's); the jars name it.
    [core] = home.glob("jars/spark-core_*.jar")
    scala = core.name.removeprefix("spark-core_").split("-", 1)[0]
    # SPARK_LOCAL_IP: the web UIs bind to it instead of every interface.
    return os.environ | {"SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_SCALA_VERSION": scala}


def _daemon(settings: Settings, name: str, main_class: str, arguments: list[str]) -> tuple[int, Path]:
    home = spark_home()
    log_dir = (settings.state_dir / "logs").resolve()
    log_file = log_dir / f"spark-{name}.log"
    log4j = write_log4j2_config(log_dir / f"log4j2-spark-{name}.properties", log_file, "INFO")
    pid = spawn(
        [_java(), f"-Xmx{settings.cluster.daemon_heap}", f"-Dlog4j2.configurationFile={log4j}",
         # The master's REST submission server would listen on a fixed port nobody here uses.
         "-Dspark.master.rest.enabled=false",
         "-cp", f"{home / 'jars'}/*", main_class, *arguments],
        log_dir / f"spark-{name}.out",
        env=_environment(home),
    )
    return pid, log_file


def _registered_workers(state: ClusterState) -> int:
    try:
        return sum(1 for worker in state.overview(timeout_s=1)["workers"] if worker["state"] == "ALIVE")
    except StackError:
        return 0


def up(settings: Settings) -> ClusterState:
    """Start the master and the workers (unless all already run); return once every worker registered."""
    state = read_state(settings)
    if state is not None and all(state.alive.values()):
        return state
    if state is not None:
        down(settings)  # leftovers of a crash: stop them, then start cleanly
    work_dir = (settings.state_dir / "cluster").resolve()
    port, ui_port = free_port(), free_port()
    master_pid, master_log = _daemon(settings, "master", MASTER_CLASS,
                                     ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)])
    state = ClusterState(master_url=f"spark://127.0.0.1:{port}", master_pid=master_pid,
                         master_ui=f"http://127.0.0.1:{ui_port}", started_at=time.time())
    # Recorded at once, so a failure below still leaves `down` what to stop.
    state_file(settings).parent.mkdir(parents=True, exist_ok=True)
    state_file(settings).write_text(json.dumps(asdict(state), indent=2))
    try:
        wait_until(lambda: _answers(state), timeout_s=settings.stack.start_timeout_s,
                   pid=master_pid, what="Spark master", log_file=master_log)
        for n in range(1, settings.cluster.workers + 1):
            worker_dir = work_dir / f"worker-{n}"
            worker_dir.mkdir(parents=True, exist_ok=True)
            pid, _ = _daemon(settings, f"worker-{n}", WORKER_CLASS, [
                "--host", "127.0.0.1", "--webui-port", "0", "--cores", str(settings.cluster.worker_cores),
                "--memory", settings.cluster.worker_memory, "--work-dir", str(worker_dir), state.master_url,
            ])
            state = replace(state, worker_pids=[*state.worker_pids, pid])
            state_file(settings).write_text(json.dumps(asdict(state), indent=2))
        wait_until(lambda: _registered_workers(state) == settings.cluster.workers,
                   timeout_s=settings.stack.start_timeout_s, pid=master_pid,
                   what=f"{settings.cluster.workers} Spark workers registering", log_file=master_log)
    except BaseException:
        down(settings)
        raise
    return state


def _answers(state: ClusterState) -> bool:
    try:
        return state.overview(timeout_s=1).get("status") == "ALIVE"
    except StackError:
        return False


def stop_daemon(pid: int, settings: Settings) -> None:
    """Stop one daemon and what it started: a worker's executors (and their Python workers)
    run in its process group, which :func:`spawn` made with the worker's own pid."""
    stop_pid(pid, timeout_s=settings.stack.stop_timeout_s)
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        if not group_members(pid):
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while group_members(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    if group_members(pid):
        raise StackError(f"processes {group_members(pid)} started by Spark daemon {pid} would not stop")


def group_members(pgid: int) -> list[int]:
    """Live processes in process group ``pgid`` (Linux: read from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        # After the command: state, ppid, pgrp; a zombie has left nothing running.
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def down(settings: Settings) -> None:
    """Stop the workers (with their executors), then the master."""
    state = read_state(settings)
    if state is None:
        return
    errors: list[str] = []
    for pid in [*state.worker_pids, state.master_pid]:
        try:
            stop_daemon(pid, settings)
        except StackError as exc:
            errors.append(str(exc))
    if errors:
        raise StackError("; ".join(errors))
    state_file(settings).unlink(missing_ok=True)


__all__ = ["ClusterState", "down", "group_members", "read_state", "spark_home", "state_file", "stop_daemon", "up"]
