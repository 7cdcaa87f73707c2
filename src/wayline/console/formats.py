"""How the console writes times and answers for people: the template filters."""

from __future__ import annotations

from datetime import UTC, datetime
from http import HTTPStatus


def _utc(moment: datetime | int) -> datetime:
    """A datetime, or epoch milliseconds (the recon store's unit), in UTC."""
    if isinstance(moment, int):
        return datetime.fromtimestamp(moment / 1000, UTC)
    return moment.astimezone(UTC)


def _clock(moment: datetime) -> str:
    return f"{moment:%H:%M:%S}" if moment.second or moment.microsecond else f"{moment:%H:%M}"


def time_span(start: datetime | int, end: datetime | int) -> str:
    """``2026-11-24 14:00 – 14:05 UTC``: the end's date only when it is another day."""
    first, last = _utc(start), _utc(end)
    until = _clock(last) if last.date() == first.date() else f"{last:%Y-%m-%d} {_clock(last)}"
    return f"{first:%Y-%m-%d} {_clock(first)} – {until} UTC"


def duration(seconds: float) -> str:
    """``0.5 s``, ``5 min``, ``1 h 30 min``: a wait as a person would say it."""
    if seconds < 60:
        return f"{seconds:g} s"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return " ".join(f"{value} {unit}" for value, unit in ((hours, "h"), (minutes, "min"), (rest, "s")) if value)


def http_status(status: int) -> str:
    """``204 No Content``; a code without a standard name stays a number."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


__all__ = ["duration", "http_status", "time_span"]
