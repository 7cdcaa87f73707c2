"""Reconciliations through the admin API: lifecycle, revisions, and what bad definitions are told."""

import itertools

import pytest

pytestmark = pytest.mark.integration

_names = itertools.count()


def body(**extra) -> dict:
    return {
        "name": f"api-recon-{next(_names)}",
        "expected": {"role": "producer-expected", "topics": ["audit.orders"], "id": "data.event_id",
                     "time": "data.event_time"},
        "actual": {"role": "actual", "pattern": "^events\\.orders\\..*"},
        "periods": {"o": 60, "n": 10, "m": "PT1H", "z": 300},
        **extra,
    }


def error(response) -> tuple[int, str, str]:
    payload = response.json()["error"]
    return response.status_code, payload["code"], payload["message"]


def test_a_reconciliation_has_a_lifecycle(admin, settings) -> None:
    created = admin.post("/reconciliations", json=body()).json()
    assert created["id"].startswith("rec_")
    assert created["periods"] == {"o": 60.0, "n": 10.0, "m": 3600.0, "z": 300.0}
    assert created["output_topic"] == settings.recon.output_topic
    assert (created["expected"]["id"], created["expected"]["source"], created["actual"]["id"]) == (
        "data.event_id", "source", "id")
    assert created["revision"] == 1
    same = admin.patch(f"/reconciliations/{created['id']}", json={"enabled": True}).json()
    assert same["revision"] == 1
    changed = admin.patch(f"/reconciliations/{created['id']}",
                          json={"periods": {"o": 30, "n": 5, "m": 600, "z": 60}}).json()
    assert (changed["revision"], changed["periods"]["m"]) == (2, 600.0)
    assert admin.get(f"/reconciliations/{created['id']}").json() == changed
    assert created["id"] in {r["id"] for r in admin.get("/reconciliations", params={"limit": 500}).json()["data"]}
    status = admin.get(f"/reconciliations/{created['id']}/status").json()
    assert (status["watermark"], status["missing_now"], status["windows"]) == (None, 0, [])
    assert admin.get(f"/reconciliations/{created['id']}/missing").json() == {"data": [], "next_cursor": None}
    assert admin.delete(f"/reconciliations/{created['id']}").status_code == 204
    assert error(admin.get(f"/reconciliations/{created['id']}"))[:2] == (404, "not_found")


@pytest.mark.parametrize(("change", "message"), [
    ({"periods": {"o": 60, "n": 120, "m": 60, "z": 60}}, "n (120 s) may not exceed m (60 s)"),
    ({"periods": {"o": 0.001, "n": 1, "m": 60, "z": 60}}, "periods.o: must be between 1 s and 86400 s"),
    ({"periods": {"o": 60, "n": 10, "m": 30 * 86400, "z": 60}}, "periods.m: must be between"),
    ({"actual": {"role": "actual", "topics": ["a"], "pattern": "b"}}, "name the topics, or give a pattern, not both"),
    ({"actual": {"role": "actual"}}, "name the topics, or give a pattern, not both"),
    ({"actual": {"role": "actual", "pattern": "(["}}, "not a regular expression"),
    ({"actual": {"role": "actual", "topics": ["bad topic"]}}, "'bad topic' is not a Kafka topic name"),
    ({"actual": {"role": "actual", "topics": ["a"], "id": "data..x"}}, "name a CloudEvents attribute"),
    ({"actual": {"role": "producer-expected", "topics": ["a"]}}, "actual.role: must be actual"),
    ({"expected": {"role": "actual", "topics": ["a"]}}, "expected.role: producer-expected or consumer-expected"),
])
def test_bad_definitions_are_refused_with_what_is_wrong(admin, change, message) -> None:
    status, code, text = error(admin.post("/reconciliations", json=body(**change)))
    assert (status, code) == (422, "invalid")
    assert message in text


def test_names_are_unique_and_reconciliations_need_an_admin_key(admin, make_customer) -> None:
    first = body()
    assert admin.post("/reconciliations", json=first).status_code == 201
    assert error(admin.post("/reconciliations", json=first))[:2] == (409, "conflict")
    _, customer = make_customer()
    assert error(customer.get("/reconciliations"))[:2] == (403, "forbidden")


def test_an_output_topic_may_be_the_default_but_no_other_reserved_topic(admin, settings) -> None:
    named_default = admin.post("/reconciliations", json=body(output_topic=settings.recon.output_topic))
    assert named_default.status_code == 201, named_default.text
    reconciliation_id = named_default.json()["id"]
    status, code, text = error(admin.patch(f"/reconciliations/{reconciliation_id}",
                                           json={"output_topic": settings.delivery.work_topic}))
    assert (status, code) == (422, "invalid")
    assert text.startswith(f"output_topic: {settings.delivery.work_topic} is reserved: it is one of Wayline's own")
    assert admin.patch(f"/reconciliations/{reconciliation_id}",
                       json={"output_topic": "recon.orders"}).json()["output_topic"] == "recon.orders"
