"""What every running job is to whoever starts and watches it: a Spark ``StreamingQuery``
already is one, and so are the jobs of several queries (``DeliveryJob``) or of a query
restarted when its plan must change (``RulesJob``, ``ReconJob``, through
:class:`RestartingQuery`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from wayline.core.errors import WaylineError

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery


class Job(Protocol):
    """A streaming query, or a job of several, as a live view or a service watches it."""

    @property
    def isActive(self) -> bool: ...  # noqa: N802 - StreamingQuery's name

    def exception(self) -> Any: ...

    def stop(self) -> None: ...


class RestartingQuery:
    """One streaming query that is stopped and started again on its checkpoint when its plan
    must change (a rule or a reconciliation needs a branch the running plan lacks); watched as
    one :class:`Job` through its restarts.

    A micro-batch cannot stop its own query, so it asks with :meth:`restart` and a supervisor
    thread does it between micro-batches.
    """

    def __init__(self, name: str, start: Callable[[], StreamingQuery],
                 on_restart: Callable[[], None] = lambda: None, batch_end_wait_s: float = 60) -> None:
        self._name = name
        self._batch_end_wait_s = batch_end_wait_s
        self._start = start
        self._on_restart = on_restart
        self._query: StreamingQuery | None = None
        self._restart = threading.Event()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._error: BaseException | None = None
        self._restarting = False

    @property
    def query(self) -> StreamingQuery | None:
        return self._query

    def begin(self) -> None:
        self._query = self._start()
        self._supervisor = threading.Thread(target=self._supervise, name=f"{self._name}-supervisor", daemon=True)
        self._supervisor.start()

    def restart(self) -> None:
        """Ask for the query to start again on its checkpoint, once the running micro-batch ends."""
        self._restart.set()

    @property
    def isActive(self) -> bool:  # noqa: N802 - reads like StreamingQuery's
        """Running, through restarts on the checkpoint, until stopped or failed."""
        return not self._stopping.is_set() and self.exception() is None

    def exception(self) -> BaseException | None:
        if self._error is not None:
            return self._error
        query = self._query
        failure = query.exception() if query is not None else None
        if failure is None:
            return None
        # Here, not at the top: the CLI imports this module and must start without pyspark.
        from wayline.pipelines.micro_batch import interrupted

        # A stop nearly always interrupts a micro-batch; it is replayed from the checkpoint.
        # Read after the failure: a restart may have ended since, its new query already in
        # place (it is set before the flag is cleared), which leaves the failure an old one's.
        stopped = self._stopping.is_set() or self._restarting or query is not self._query
        if stopped and interrupted(failure):
            return None
        return WaylineError(f"the {self._name} query failed: {failure}")

    def stop(self) -> None:
        self._stopping.set()
        self._restart.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=120)
        if self._query is not None:
            self._query.stop()

    def _supervise(self) -> None:
        while not self._stopping.is_set():
            self._restart.wait()
            if self._stopping.is_set():
                return
            self._restart.clear()
            self._restarting = True
            try:
                assert self._query is not None
                self._let_batch_end(self._query)
                self._query.stop()
                self._on_restart()
                self._query = self._start()
            except BaseException as exc:  # noqa: BLE001 - surfaced by exception()
                self._error = exc
                return
            finally:
                self._restarting = False

    def _let_batch_end(self, query: StreamingQuery) -> None:
        """Wait (up to ``batch_end_wait_s``) for the running batch, usually the one that
        asked, to end: stopping it would interrupt it, to be replayed after the restart.
        It has ended once the trigger is idle or a newer batch reported its progress:
        back-to-back micro-batches, or a real-time query's batches (each as long as its
        checkpoint interval), leave the trigger active between them."""
        deadline = time.monotonic() + self._batch_end_wait_s
        running = _batch_id(query)
        while (query.isActive and query.status.get("isTriggerActive") and _batch_id(query) == running
               and time.monotonic() < deadline):
            time.sleep(0.05)


def _batch_id(query: StreamingQuery) -> int | None:
    progress = query.lastProgress
    return None if progress is None else progress.batchId


__all__ = ["Job", "RestartingQuery"]
