"""The messaging API's own refusals, beside the registry's (401/403/404/409/422)."""

from __future__ import annotations

from wayline.core.errors import Conflict, RejectedInput, RetryLater


class TooLarge(RejectedInput):
    """The request or one event in it is over a size or count limit (HTTP 413)."""


class NotJson(RejectedInput):
    """The request body is not JSON at all (HTTP 400)."""


class Misdirected(Conflict):
    """A transaction lives on another instance of the service (HTTP 421): send the request there."""

    def __init__(self, message: str, instance: str) -> None:
        super().__init__(message)
        self.instance = instance


class Busy(RetryLater):
    """Every transactional producer (or poll consumer) of this instance is in use (HTTP 429)."""


__all__ = ["Busy", "Misdirected", "NotJson", "TooLarge"]
