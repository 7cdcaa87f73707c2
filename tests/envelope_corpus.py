"""Kafka records with the envelope verdict each must get; the Python parser and the Spark
parser are both held to it (tests/core/test_envelope.py, tests/pipelines/test_envelope.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson

MAX_BYTES = 1024
MAX_FUTURE_SKEW_S = 300.0


def event(**overrides: object) -> bytes:
    body: dict[str, object] = {
        "specversion": "1.0", "id": "evt-1", "source": "/billing", "type": "invoice.paid",
        "tenantid": "t-1", "data": {"amount": 12.5, "currency": "EUR"},
    }
    body.update(overrides)
    return orjson.dumps({k: v for k, v in body.items() if v is not None})


@dataclass(frozen=True)
class Case:
    name: str
    value: bytes | None
    reason: str | None  # None: a valid event
    detail: str = ""
    headers: tuple[tuple[str, bytes], ...] = ()
    time: datetime | None = None  # the instant a valid event's `time` names


BAD_TIME = "time is not an RFC 3339 timestamp from year 1 to 9999 (UTC)"
BAD_ATTRIBUTE = "attribute(s) {}: a JSON object or array, or a control character"
BAD_NAME = "attribute name {}: CloudEvents names are lower-case ASCII letters and digits"
FUTURE_TIME = "the event time is more than 300 s ahead of the clock"
NOT_UTF8 = "the value or a ce_ header is not valid UTF-8"


def bad_time(name: str, time: object) -> Case:
    return Case(f"bad time: {name}", event(time=time), "bad_time", BAD_TIME)


def good_time(name: str, time: str, instant: datetime) -> Case:
    return Case(f"time: {name}", event(time=time), None, time=instant)


T = datetime(2026, 11, 22, 7, tzinfo=UTC)
# Ahead of the clock by less than the skew bound when the parsers run, which is later.
SOON = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=60)

BINARY_HEADERS = (
    ("ce_specversion", b"1.0"), ("ce_id", b"evt-b"), ("ce_source", b"/crm"),
    ("ce_type", b"contact.created"), ("ce_tenantid", b"t-9"), ("ce_subtenantid", b"d-100"),
)

CASES = [
    Case("structured", event(), None),
    Case("with subject, time, subtenant", event(subject="inv/1", time="2026-11-22T07:00:00Z", subtenantid="d-200"), None,
         time=T),
    Case("numeric id read as text", event(id=5), None),
    Case("binary mode", b'{"name":"Ada"}', None, headers=BINARY_HEADERS),
    Case("tombstone", None, "empty", "the record has no value"),
    Case("empty value", b"", "empty", "the record has no value"),
    Case("oversize", event(data={"pad": "x" * 1100}), "oversize"),
    Case("not json", b"hello, world", "not_json", "the value is not valid JSON"),
    Case("truncated json", event()[:-5], "not_json", "the value is not valid JSON"),
    Case("json array", b'[{"id":"a"}]', "not_object", "the value is JSON but not an object"),
    Case("json number", b"42", "not_object", "the value is JSON but not an object"),
    Case("missing id and source", event(id=None, source=None), "missing_attribute",
         "missing CloudEvents attribute(s): id, source"),
    Case("empty type", event(type=""), "missing_attribute", "missing CloudEvents attribute(s): type"),
    Case("object without attributes", b'{"hello":"world"}', "missing_attribute",
         "missing CloudEvents attribute(s): specversion, id, source, type"),
    Case("bad specversion", event(specversion="0.3"), "bad_specversion", "specversion must be 1.0"),
    Case("missing tenant", event(tenantid=None), "missing_tenant", "the tenantid extension attribute is missing"),
    Case("bad time", event(time="yesterday"), "bad_time", BAD_TIME),
    # Where the two parsers used to disagree: each rule below is TIME_PATTERN's, not a parser's.
    bad_time("a year alone", "2025"),  # Spark cast it to 2025-01-01
    bad_time("a year as a JSON number", 2025),
    bad_time("a date alone", "2025-01-01"),
    bad_time("no offset", "2026-11-22T07:00:00"),  # Python assumed UTC, Spark the session's zone
    bad_time("no seconds", "2026-11-22T07:00Z"),  # Python took it
    bad_time("a space for T", "2026-11-22 07:00:00Z"),
    bad_time("an offset without colon", "2026-11-22T07:00:00+0100"),
    bad_time("an hour-only offset", "2026-11-22T07:00:00+01"),
    bad_time("a trailing newline", "2026-11-22T07:00:00Z\n"),  # Spark trimmed it
    bad_time("a leading space", " 2026-11-22T07:00:00Z"),
    bad_time("an empty fraction", "2026-11-22T07:00:00.Z"),
    bad_time("an offset past 18:00", "2026-11-22T07:00:00+23:59"),  # Python took it, the JVM cannot
    bad_time("30 February", "2026-02-30T07:00:00Z"),
    bad_time("hour 24", "2026-11-22T24:00:00Z"),
    bad_time("a leap second", "2026-12-31T23:59:60Z"),
    bad_time("Unicode digits", "\u0662026-11-22T07:00:00Z"),
    good_time("lower-case t and z, nanoseconds", "2026-11-22t07:00:00.123456789z",
              T.replace(microsecond=123456)),  # Spark refused the case; both keep microseconds
    good_time("an offset", "2026-11-22T08:30:00+01:30", T),
    good_time("offset -00:00", "2026-11-22T07:00:00-00:00", T),
    good_time("offset +18:00", "2026-11-23T01:00:00+18:00", T),
    # One definition of the instants a time may name, for the pipelines and the messaging API.
    bad_time("the year 0", "0000-01-01T00:00:00Z"),  # Spark took it, Python could not
    bad_time("before the year 1 by its offset", "0001-01-01T00:30:00+01:00"),
    bad_time("after 9999 by its offset", "9999-12-31T23:30:00-01:00"),
    good_time("a minute ahead of the clock", SOON.isoformat(), SOON),
    Case("the last instant of 9999", event(time="9999-12-31T23:59:59.999999Z"), "future_time", FUTURE_TIME),
    Case("two hours ahead of the clock", event(time=(SOON + timedelta(hours=2)).isoformat()), "future_time",
         FUTURE_TIME),
    # Bytes that are not UTF-8: JSON text must be, and so must every attribute a header carries.
    Case("invalid UTF-8 in a JSON string", event(data={"name": "Ada"}).replace(b"Ada", b"A\xffa"), "not_utf8",
         NOT_UTF8),
    Case("binary mode, ce_id not UTF-8", b'{"name":"Ada"}', "not_utf8", NOT_UTF8,
         headers=(*BINARY_HEADERS[:1], ("ce_id", b"\xc3("), *BINARY_HEADERS[2:])),
    Case("binary mode, an extension not UTF-8", b'{"name":"Ada"}', "not_utf8", NOT_UTF8,
         headers=(*BINARY_HEADERS, ("ce_note", b"\xed\xa0\x80"))),
    Case("binary mode, bad time", b"{}", "bad_time", BAD_TIME, headers=(*BINARY_HEADERS, ("ce_time", b"2025"))),
    Case("binary mode, data not json", b"plain text", "not_json", "the value is not valid JSON", headers=BINARY_HEADERS),
    Case("binary mode, no tenant", b"{}", "missing_tenant", "the tenantid extension attribute is missing",
         headers=BINARY_HEADERS[:4]),
]

# What CloudEvents forbids in attributes and their names: the reference parser (and so
# publishing) refuses it; the Spark parser does not state these rules yet (see
# wayline.core.envelope), so only tests/core/test_envelope.py holds a parser to them.
ATTRIBUTE_CASES = [
    Case("an object type", event(type={"name": "invoice.paid"}), "bad_attribute", BAD_ATTRIBUTE.format("type")),
    Case("an array subject and an object extension", event(subject=["a"], subtenantid={}), "bad_attribute",
         BAD_ATTRIBUTE.format("subject, subtenantid")),
    Case("a CR/LF in tenantid", event(tenantid="t-1\r\nX-Injected: 1"), "bad_attribute", BAD_ATTRIBUTE.format("tenantid")),
    Case("a control character in source", event(source="/billing\u0085"), "bad_attribute", BAD_ATTRIBUTE.format("source")),
    Case("a type that is a string opening with a brace", event(type="{invoice}.paid"), None),
    Case("binary mode, a LF in a header", b"{}", "bad_attribute", BAD_ATTRIBUTE.format("id"),
         headers=(*BINARY_HEADERS[:1], ("ce_id", b"evt-b\n"), *BINARY_HEADERS[2:])),
    Case("an upper-case extension name", event(tenantId="t-2"), "bad_name", BAD_NAME.format("tenantId")),
    Case("an extension name with an underscore", event(trace_id="x"), "bad_name", BAD_NAME.format("trace_id")),
    Case("lower-case extensions and upper-case data keys", event(traceparent="00-ab", data={"Amount": 1}), None),
    Case("binary mode, an upper-case header name", b"{}", "bad_name", BAD_NAME.format("Partition"),
         headers=(*BINARY_HEADERS, ("ce_Partition", b"1"))),
    Case("data_base64 that is not base64", event(data=None, data_base64="not base64!"), "bad_data_base64",
         "data_base64 is not base64"),
    Case("data_base64 without its padding", event(data=None, data_base64="aGk"), "bad_data_base64",
         "data_base64 is not base64"),
    Case("data_base64", event(data=None, data_base64="aGk="), None),
]


def expected_detail(case: Case) -> str:
    if case.reason == "oversize":
        assert case.value is not None
        return f"value is {len(case.value)} bytes, over the {MAX_BYTES}-byte limit"
    return case.detail
