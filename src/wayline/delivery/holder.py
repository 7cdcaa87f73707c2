"""The registry snapshot a running job delivers with, swapped when the registry changes.

The job asks for the current snapshot at the start of every micro-batch. At most every
``poll_s`` seconds that reads the registry version (one indexed row); only when the
version moved is a new snapshot loaded, and the old one retired (its broadcast freed).
A registry that cannot be read is not a reason to stop delivering: the job keeps the
snapshot it has, logs why, and tries again at the next poll. Only the very first load
must succeed.

One holder serves every query of a job, so the poll interval is shared: a version read
by the batching query's tick a moment before the job disabled a subscription (410 Gone)
counted as the matching query's poll too, and its next micro-batch kept sending with the
old snapshot for up to ``poll_s``. A change the job makes itself therefore calls
:meth:`SnapshotHolder.refresh`, and the next :meth:`~SnapshotHolder.current` reads the
version at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from wayline.core.errors import WaylineError

_log = logging.getLogger(__name__)


class Versioned(Protocol):
    @property
    def version(self) -> int: ...


_S = TypeVar("_S", bound=Versioned)


class SnapshotHolder(Generic[_S]):
    """Holds one snapshot at a time; :meth:`current` swaps it between micro-batches."""

    def __init__(
        self,
        load: Callable[[], _S],
        version: Callable[[], int],
        poll_s: float,
        retire: Callable[[_S], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._version = version
        self._poll_s = poll_s
        self._retire = retire
        self._clock = clock
        self._held: _S | None = None
        self._polled_at: float | None = None
        # Several queries of one job ask from their own threads.
        self._lock = threading.Lock()

    def current(self) -> _S:
        with self._lock:
            return self._current()

    def refresh(self) -> None:
        """The registry just changed: the next :meth:`current` reads its version, however recent the last poll."""
        with self._lock:
            self._polled_at = None

    def _current(self) -> _S:
        now = self._clock()
        if self._held is None:
            self._held = self._load()
            self._polled_at = now
            return self._held
        if self._polled_at is not None and now - self._polled_at < self._poll_s:
            return self._held
        self._polled_at = now
        try:
            if self._version() != self._held.version:
                fresh = self._load()
                self._retire(self._held)
                self._held = fresh
        except WaylineError as exc:
            _log.warning("keeping registry snapshot version %d: %s", self._held.version, exc)
        return self._held


_T = TypeVar("_T")


class Polled(Generic[_T]):
    """A value read again at most every ``poll_s`` seconds; a read that fails keeps the last one."""

    def __init__(self, read: Callable[[], _T], initial: _T, poll_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._value = initial
        self._poll_s = poll_s
        self._clock = clock
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def current(self) -> _T:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._poll_s:
                self._read_at = now
                try:
                    self._value = self._read()
                except WaylineError as exc:
                    _log.warning("keeping the last value read: %s", exc)
            return self._value


__all__ = ["Polled", "SnapshotHolder", "Versioned"]
