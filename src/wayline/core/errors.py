"""Every error Wayline raises, grouped by what the caller does next.

WaylineError
├── ConfigError            fix the settings or the environment, then run again
│   └── MissingJarsError   run `make jars`
├── StackError             the local stack (broker, database) failed to start or stop
├── RejectedInput          the request or definition is invalid: report it, never retry
│   ├── Unauthorized       no API key, or not a valid one
│   ├── Forbidden          the key's scope does not allow this
│   ├── NotFound           no such object, or not one the caller may see
│   ├── Conflict           clashes with the current state (duplicate, reused idempotency key)
│   ├── TooLarge           over a size limit: send less
│   └── TooMany            over a rate limit: send again later
├── RetryLater             a transient failure: try again after a delay
└── GiveUp                 a permanent failure: dead-letter and stop trying

Errors from other libraries are translated where they enter Wayline
(``raise ... from exc``), so callers only ever catch these.
"""

from __future__ import annotations


class WaylineError(Exception):
    """Root of every error Wayline raises on purpose."""


class ConfigError(WaylineError):
    """The settings or the environment are wrong; the message says which value to fix."""


class MissingJarsError(ConfigError):
    """The JVM jars that Maven fetches are not where the settings say."""


class StackError(WaylineError):
    """A local stack process (Kafka broker, PostgreSQL) could not be started or stopped."""


class RejectedInput(WaylineError):
    """An input is invalid and will stay invalid: report it to whoever sent it."""


class Unauthorized(RejectedInput):
    """No API key was given, or it is unknown or revoked."""


class Forbidden(RejectedInput):
    """The caller's key does not have the scope this operation needs."""


class NotFound(RejectedInput):
    """No such object, or one the caller may not see (the two look the same on purpose)."""


class Conflict(RejectedInput):
    """The request clashes with the current state."""


class TooLarge(RejectedInput):
    """The input is over a size limit; the message names the limit."""


class TooMany(RejectedInput):
    """Over a rate limit; the same request is accepted once the window has passed."""


class RetryLater(WaylineError):
    """A transient failure: the same operation may succeed after a delay."""


class GiveUp(WaylineError):
    """A permanent failure: retrying cannot help."""


__all__ = [
    "ConfigError",
    "Conflict",
    "Forbidden",
    "GiveUp",
    "MissingJarsError",
    "NotFound",
    "RejectedInput",
    "RetryLater",
    "StackError",
    "TooLarge",
    "TooMany",
    "Unauthorized",
    "WaylineError",
]
