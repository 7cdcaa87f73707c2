"""The event envelope: CloudEvents 1.0 on Kafka, with Wayline's tenant extensions.

A Kafka record carries one event in either CloudEvents mode:
- *structured*: the value is the JSON CloudEvent (``specversion``, ``id``, ``source``,
  ``type``, optional ``subject``, ``time``, ``datacontenttype``, ``data``, extensions);
- *binary*: attributes travel as ``ce_<name>`` headers and the value is the JSON data.
Wayline requires the extension attribute ``tenantid``; ``subtenantid`` is optional.

A record that is not a usable event is *rejected* with a reason code and a readable
detail, and the pipeline sends it, unchanged, to the quarantine topic with both in
headers. This module is the reference definition, in pure Python, and the constants the
delivery path shares; ``wayline.pipelines.envelope`` applies the same rules as Spark SQL
expressions, and the integration tests hold the two to the same answers.

Attribute values that are JSON numbers or booleans are read as their JSON text (``5``
→ ``"5"``), as Spark's ``from_json`` does; an empty string counts as missing.

``time`` is an RFC 3339 ``date-time`` as :data:`TIME_PATTERN` states it, and a real
instant (no 30 February, no hour 24) from :data:`EARLIEST_TIME` to :data:`LATEST_TIME`;
both parsers check the pattern and the range themselves, so neither parser's leniency
(Spark casts ``"2025"``, Python ``"2025-01-01"``; Spark's timestamps reach the year 0 and
beyond 9999) decides.

As CloudEvents requires, no attribute is a JSON object or array or holds a control
character (a CR/LF ``tenantid`` would split a header), every attribute name is lower-case
ASCII letters and digits (structured mode: every member but ``data`` and ``data_base64``;
binary mode: what follows ``ce_``), and ``data_base64`` is base64. Publishing applies
these four rules; the Spark parser does not yet: stated as expressions they made its parse
two to four times slower (attribute names need a second scan of every value), so an
event written straight to Kafka with them is still delivered (docs/decisions.md, issue 23).

An event whose time is more than ``envelope.max_future_skew_s`` ahead of the clock is
rejected (``future_time``): its time would move every watermark downstream so far that
every later event counted as late. The pipelines bound the event time they use (its
``time``, or else the Kafka record's timestamp) against their micro-batch's clock; the
messaging API bounds ``time`` against its own.

The value, and in binary mode every ``ce_`` header, must be valid UTF-8 (``not_utf8``):
JSON text is UTF-8 (RFC 8259), and Spark would otherwise take the bytes as they are and
send them on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import orjson

SPEC_VERSION = "1.0"
REQUIRED_ATTRIBUTES = ("specversion", "id", "source", "type")
OPTIONAL_ATTRIBUTES = ("subject", "time", "datacontenttype", "dataschema")
TENANT = "tenantid"
SUBTENANT = "subtenantid"
ATTRIBUTES = REQUIRED_ATTRIBUTES + OPTIONAL_ATTRIBUTES + (TENANT, SUBTENANT)
BINARY_PREFIX = "ce_"
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"

# RFC 3339 date-time: a full date, "T", a time with seconds, an offset; T and Z in either
# case; at most nine fraction digits (both parsers keep six). Offsets stop at ±18:00, the
# JVM's limit (no zone uses more). Written for both regex dialects: Python's `re.search` and
# Spark's RLIKE (Java, `find`); the lookahead ends the input where `$` would allow a final
# newline. Leap seconds (:60) match but neither parser takes them.
TIME_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:[Zz]|[+-](?:(?:0[0-9]|1[0-7]):[0-5][0-9]|18:00))(?![\s\S])"
)
_TIME = re.compile(TIME_PATTERN)
# Written, like TIME_PATTERN, for both dialects, for the day the Spark parser states these rules.
CONTROL_PATTERN = r"[\x00-\x1f\x7f-\x9f]"
NAME_PATTERN = r"^[a-z0-9]+(?![\s\S])"
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?(?![\s\S])"
_CONTROL, _NAME, _BASE64 = re.compile(CONTROL_PATTERN), re.compile(NAME_PATTERN), re.compile(BASE64_PATTERN)
DATA_MEMBERS = ("data", "data_base64")
# The instants a `time` may name: Python's datetime range, in UTC (Spark's reaches further).
EARLIEST_TIME = datetime(1, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)

# Headers the quarantine adds to the untouched original record.
REASON_HEADER = "wayline-quarantine-reason"
DETAIL_HEADER = "wayline-quarantine-detail"
SOURCE_TOPIC_HEADER = "wayline-source-topic"
SOURCE_PARTITION_HEADER = "wayline-source-partition"
SOURCE_OFFSET_HEADER = "wayline-source-offset"
# On a copy too large for Kafka, which then references the original instead of holding it.
TRUNCATED_HEADER = "wayline-quarantine-truncated"


class Reason(StrEnum):
    EMPTY = "empty"
    OVERSIZE = "oversize"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    MISSING_ATTRIBUTE = "missing_attribute"
    BAD_SPECVERSION = "bad_specversion"
    MISSING_TENANT = "missing_tenant"
    BAD_TIME = "bad_time"
    BAD_ATTRIBUTE = "bad_attribute"
    BAD_NAME = "bad_name"
    BAD_DATA_BASE64 = "bad_data_base64"
    FUTURE_TIME = "future_time"
    NOT_UTF8 = "not_utf8"


def oversize_detail(size: int, limit: int) -> str:
    return f"value is {size} bytes, over the {limit}-byte limit"


def missing_detail(names: Sequence[str]) -> str:
    return "missing CloudEvents attribute(s): " + ", ".join(names)


def attribute_detail(names: Sequence[str]) -> str:
    return "attribute(s) " + ", ".join(names) + ": a JSON object or array, or a control character"


def name_detail(name: str) -> str:
    return f"attribute name {name}: CloudEvents names are lower-case ASCII letters and digits"
def future_detail(max_future_skew_s: float) -> str:
    return f"the event time is more than {max_future_skew_s:g} s ahead of the clock"


DETAILS: Mapping[Reason, str] = {
    Reason.EMPTY: "the record has no value",
    Reason.NOT_JSON: "the value is not valid JSON",
    Reason.NOT_OBJECT: "the value is JSON but not an object",
    Reason.BAD_SPECVERSION: f"specversion must be {SPEC_VERSION}",
    Reason.MISSING_TENANT: f"the {TENANT} extension attribute is missing",
    Reason.BAD_TIME: "time is not an RFC 3339 timestamp from year 1 to 9999 (UTC)",
    Reason.BAD_DATA_BASE64: "data_base64 is not base64",
    Reason.NOT_UTF8: f"the value or a {BINARY_PREFIX} header is not valid UTF-8",
}


@dataclass(frozen=True)
class Envelope:
    id: str
    source: str
    type: str
    tenantid: str
    specversion: str = SPEC_VERSION
    subject: str | None = None
    time: datetime | None = None
    datacontenttype: str | None = None
    dataschema: str | None = None
    subtenantid: str | None = None
    data: Any = None


@dataclass(frozen=True)
class Rejection:
    reason: Reason
    detail: str = field(default="")


def parse_record(
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
    *,
    max_bytes: int,
    max_future_skew_s: float | None = None,
    now: datetime | None = None,
) -> Envelope | Rejection:
    """Read one Kafka record as an event, or say exactly why it is not one.

    With ``max_future_skew_s``, a ``time`` more than that ahead of ``now`` (default: the
    clock) is rejected as ``future_time``."""
    if value is None or len(value) == 0:
        return Rejection(Reason.EMPTY, DETAILS[Reason.EMPTY])
    if len(value) > max_bytes:
        return Rejection(Reason.OVERSIZE, oversize_detail(len(value), max_bytes))
    raw_attributes = [(key[len(BINARY_PREFIX):], raw) for key, raw in (headers or ())
                      if key.startswith(BINARY_PREFIX) and raw is not None]
    try:
        value.decode()
        binary = {name: raw.decode() for name, raw in raw_attributes} \
            if any(name == "specversion" for name, _ in raw_attributes) else {}
    except UnicodeDecodeError:
        return Rejection(Reason.NOT_UTF8, DETAILS[Reason.NOT_UTF8])
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError:
        return Rejection(Reason.NOT_JSON, DETAILS[Reason.NOT_JSON])

    if "specversion" in binary:
        attributes: Mapping[str, Any] = binary
        data, names, data_base64 = decoded, list(binary), None
    elif isinstance(decoded, dict):
        attributes, data = decoded, decoded.get("data")
        names = [name for name in decoded if name not in DATA_MEMBERS]
        data_base64 = _attribute_text(decoded.get("data_base64"))
    else:
        return Rejection(Reason.NOT_OBJECT, DETAILS[Reason.NOT_OBJECT])

    text = {name: _attribute_text(attributes.get(name)) for name in ATTRIBUTES}
    missing = [name for name in REQUIRED_ATTRIBUTES if text[name] is None]
    if missing:
        return Rejection(Reason.MISSING_ATTRIBUTE, missing_detail(missing))
    if text["specversion"] != SPEC_VERSION:
        return Rejection(Reason.BAD_SPECVERSION, DETAILS[Reason.BAD_SPECVERSION])
    if text[TENANT] is None:
        return Rejection(Reason.MISSING_TENANT, DETAILS[Reason.MISSING_TENANT])
    time = _event_time(text["time"], max_future_skew_s, now)
    if isinstance(time, Rejection):
        return time
    bad = [name for name in ATTRIBUTES if isinstance(attributes.get(name), (dict, list))
           or (text[name] is not None and _CONTROL.search(text[name]))]
    if bad:
        return Rejection(Reason.BAD_ATTRIBUTE, attribute_detail(bad))
    misnamed = next((name for name in names if not _NAME.search(name)), None)
    if misnamed is not None:
        return Rejection(Reason.BAD_NAME, name_detail(misnamed))
    if data_base64 is not None and not _BASE64.search(data_base64):
        return Rejection(Reason.BAD_DATA_BASE64, DETAILS[Reason.BAD_DATA_BASE64])
    return Envelope(
        id=str(text["id"]),
        source=str(text["source"]),
        type=str(text["type"]),
        tenantid=str(text[TENANT]),
        specversion=SPEC_VERSION,
        subject=text["subject"],
        time=time,
        datacontenttype=text["datacontenttype"],
        dataschema=text["dataschema"],
        subtenantid=text[SUBTENANT],
        data=data,
    )


def _event_time(text: str | None, max_future_skew_s: float | None, now: datetime | None) -> datetime | Rejection | None:
    """The ``time`` attribute read (None without one), or why it is refused."""
    if text is None:
        return None
    time = parse_time(text)
    if time is None:
        return Rejection(Reason.BAD_TIME, DETAILS[Reason.BAD_TIME])
    if max_future_skew_s is not None and time > (now or datetime.now(UTC)) + timedelta(seconds=max_future_skew_s):
        return Rejection(Reason.FUTURE_TIME, future_detail(max_future_skew_s))
    return time


def _attribute_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def parse_time(text: str) -> datetime | None:
    """The instant a CloudEvents ``time`` names, or ``None`` if it is not a valid RFC 3339
    date-time from :data:`EARLIEST_TIME` to :data:`LATEST_TIME`."""
    if _TIME.search(text) is None:
        return None
    try:
        # Python keeps microseconds and drops finer digits, as Spark's timestamps do.
        instant = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    return instant if EARLIEST_TIME <= instant <= LATEST_TIME else None


def to_structured(envelope: Envelope) -> bytes:
    """The structured-mode JSON of an envelope, as producers put it in a Kafka value."""
    body: dict[str, Any] = {
        "specversion": envelope.specversion,
        "id": envelope.id,
        "source": envelope.source,
        "type": envelope.type,
        TENANT: envelope.tenantid,
    }
    optional = {
        "subject": envelope.subject,
        "time": envelope.time.isoformat().replace("+00:00", "Z") if envelope.time else None,
        "datacontenttype": envelope.datacontenttype,
        "dataschema": envelope.dataschema,
        SUBTENANT: envelope.subtenantid,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if envelope.data is not None:
        body["data"] = envelope.data
    return orjson.dumps(body)


__all__ = [
    "ATTRIBUTES",
    "BASE64_PATTERN",
    "BINARY_PREFIX",
    "CONTROL_PATTERN",
    "DATA_MEMBERS",
    "DETAILS",
    "DETAIL_HEADER",
    "EARLIEST_TIME",
    "Envelope",
    "NAME_PATTERN",
    "LATEST_TIME",
    "OPTIONAL_ATTRIBUTES",
    "REASON_HEADER",
    "REQUIRED_ATTRIBUTES",
    "Reason",
    "Rejection",
    "SOURCE_OFFSET_HEADER",
    "SOURCE_PARTITION_HEADER",
    "SOURCE_TOPIC_HEADER",
    "SPEC_VERSION",
    "STRUCTURED_CONTENT_TYPE",
    "SUBTENANT",
    "TENANT",
    "TIME_PATTERN",
    "TRUNCATED_HEADER",
    "attribute_detail",
    "future_detail",
    "missing_detail",
    "name_detail",
    "oversize_detail",
    "parse_record",
    "parse_time",
    "to_structured",
]
