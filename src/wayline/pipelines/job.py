"""What every running job is to whoever starts and watches it: a Spark ``StreamingQuery``
already is one, and so are the jobs of several queries (``DeliveryJob``, ``RulesJob``)."""

from __future__ import annotations

from typing import Any, Protocol


class Job(Protocol):
    """A streaming query, or a job of several, as a live view or a service watches it."""

    @property
    def isActive(self) -> bool: ...  # noqa: N802 - StreamingQuery's name

    def exception(self) -> Any: ...

    def stop(self) -> None: ...


__all__ = ["Job"]
