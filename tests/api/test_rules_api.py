"""Rules through the admin API: lifecycle, revisions, and the messages that reject bad rules."""

import itertools

import pytest

from wayline.registry import rule as rule_service

pytestmark = pytest.mark.integration

_names = itertools.count()
FILTER = "SELECT id, data.amount AS amount FROM events WHERE data.amount > 100"
PATTERN = """SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user ORDER BY event_time MEASURES COUNT(F.*) AS failures
  PATTERN (F{3,} S) WITHIN INTERVAL '5' MINUTE
  DEFINE F AS F.type = 'login.failed', S AS S.type = 'login.ok')"""


def body(sql: str = FILTER, **extra) -> dict:
    return {"name": f"api-rule-{next(_names)}", "sql": sql, "output_topic": "rules.out.api",
            "output_type": "alert.api", **extra}


def error(response) -> tuple[int, str, str]:
    payload = response.json()["error"]
    return response.status_code, payload["code"], payload["message"]


def test_a_rule_has_a_lifecycle_and_a_changed_definition_a_new_revision(admin, settings) -> None:
    created = admin.post("/rules", json=body(PATTERN)).json()
    assert (created["kind"], created["partition_key"], created["status"], created["revision"]) == (
        "pattern", ["data.user"], "running", 1)
    assert created["state_budget"] == settings.rules.default_state_budget
    same = admin.patch(f"/rules/{created['id']}", json={"sql": PATTERN, "output_type": "alert.other"}).json()
    assert (same["revision"], same["output_type"]) == (1, "alert.other")
    changed = admin.patch(f"/rules/{created['id']}", json={"sql": PATTERN.replace("{3,}", "{4,}")}).json()
    assert changed["revision"] == 2
    stopped = admin.patch(f"/rules/{created['id']}", json={"enabled": False}).json()
    assert (stopped["status"], stopped["revision"]) == ("stopped", 2)
    assert created["id"] in {r["id"] for r in admin.get("/rules", params={"status": "stopped"}).json()["data"]}
    assert admin.delete(f"/rules/{created['id']}").status_code == 204
    assert admin.get(f"/rules/{created['id']}").status_code == 404


def test_a_quarantined_rule_is_fixed_and_enabled_again_with_fresh_state(admin, database) -> None:
    created = admin.post("/rules", json=body()).json()
    with database.transaction() as session:
        assert rule_service.quarantine(session, created["id"], 1, "ZeroDivisionError: boom")
        assert not rule_service.quarantine(session, created["id"], 1, "again")  # not running any more
    quarantined = admin.get(f"/rules/{created['id']}").json()
    assert (quarantined["status"], quarantined["error"], quarantined["quarantines"]) == (
        "quarantined", "ZeroDivisionError: boom", 1)
    fixed = admin.patch(f"/rules/{created['id']}", json={"enabled": True}).json()
    assert (fixed["status"], fixed["error"], fixed["revision"]) == ("running", None, 2)


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT * FROM events WHERE data.x >", "sql: SQL syntax error at line 1"),
    ("SELECT amount FROM events", "unknown column amount; the events stream has id, source, type"),
    ("SELECT tenantid, COUNT(*) AS n FROM events GROUP BY tenantid",
     "an aggregation rule needs a time bound: GROUP BY window(event_time"),
    (PATTERN.replace("WITHIN INTERVAL '5' MINUTE", ""), "a pattern rule needs a time bound: add WITHIN INTERVAL"),
    (PATTERN.replace("ONE", "").replace("PATTERN", "ALL ROWS PER MATCH PATTERN"), "ALL ROWS PER MATCH is not supported"),
    (PATTERN.replace("F.type = 'login.failed'", "NEXT(F.type) = 'x'"), "NEXT() reads rows after the current one"),
    ("DELETE FROM events", "a rule is one SELECT ... FROM events statement"),
    ("SELECT java_method('java.lang.System', 'exit', 0) AS x FROM events", "function JAVA_METHOD() is not supported"),
])
def test_bad_rules_are_rejected_at_the_api_with_a_precise_message(admin, sql: str, message: str) -> None:
    status, code, text = error(admin.post("/rules", json=body(sql)))
    assert (status, code) == (422, "invalid")
    assert message.removeprefix("sql: ") in text


def test_bad_fields_and_duplicates_are_rejected(admin, make_customer) -> None:
    assert "output_topic" in error(admin.post("/rules", json=body(output_topic="bad topic!")))[2]
    assert "partition_key: tenantid differs from the key the SQL states (data.user)" in error(
        admin.post("/rules", json=body(PATTERN, partition_key=["tenantid"])))[2]
    taken = body()
    assert admin.post("/rules", json=taken).status_code == 201
    assert error(admin.post("/rules", json=taken))[:2] == (409, "conflict")
    _, customer_client = make_customer()
    assert error(customer_client.post("/rules", json=body()))[:2] == (403, "forbidden")


def test_a_rule_writing_to_an_alert_topic_puts_its_output_type_in_the_catalog(admin) -> None:
    name = f"alert.api.{next(_names)}"
    assert admin.get(f"/event-types/{name}").status_code == 404
    # Stopped: other tests' jobs run every running rule, and would feed the alert topic.
    created = admin.post("/rules", json=body(PATTERN, output_topic="alerts.api", output_type=name, enabled=False))
    assert created.status_code == 201, created.text
    entered = admin.get(f"/event-types/{name}").json()
    assert entered["description"] == f"the output of rule {created.json()['name']}"
    # A rule moved onto an alert topic enters its type then; a type already there is kept as it is.
    quiet = admin.post("/rules", json=body(output_type=f"{name}.quiet", enabled=False)).json()
    assert admin.get(f"/event-types/{name}.quiet").status_code == 404
    assert admin.patch(f"/rules/{quiet['id']}", json={"output_topic": "alerts.api.quiet"}).status_code == 200
    assert admin.get(f"/event-types/{name}.quiet").status_code == 200
    assert admin.post("/rules", json=body(output_topic="alerts.api", output_type=name, enabled=False)).status_code == 201
    assert admin.get(f"/event-types/{name}").json() == entered


@pytest.mark.parametrize(("output_type", "message"), [
    ("wayline.endpoint.disabled", "output_type: wayline.endpoint.disabled is one of Wayline's own event types"),
    ("alert with spaces", "output_type: 'alert with spaces' is not an event type name"),
])
def test_an_alert_rule_s_output_type_must_be_a_catalog_name_of_its_own(admin, output_type: str, message: str) -> None:
    status, code, text = error(admin.post("/rules", json=body(output_topic="alerts.api", output_type=output_type)))
    assert (status, code) == (422, "invalid") and text.startswith(message)
    # Elsewhere its output is not delivered, so its type is the rule's own business.
    assert admin.post("/rules", json=body(output_type=output_type, enabled=False)).status_code == 201


def test_a_rule_that_orders_data_paths_against_each_other_is_taken_with_a_warning(admin) -> None:
    # Spark reads both paths as strings there: '10' < '9'.
    text = "SELECT id FROM events WHERE data.spent > data.limit"
    created = admin.post("/rules", json=body(text))
    assert created.status_code == 201
    [warning] = created.json()["warnings"]
    assert warning.startswith("data.spent > data.limit: data.* paths compared with each other are read as strings")
    assert "write TRY_CAST(data.spent AS DOUBLE) > TRY_CAST(data.limit AS DOUBLE)" in warning
    fixed = admin.patch(f"/rules/{created.json()['id']}", json={
        "sql": "SELECT id FROM events WHERE TRY_CAST(data.spent AS DOUBLE) > TRY_CAST(data.limit AS DOUBLE)"})
    assert (fixed.status_code, fixed.json()["warnings"]) == (200, [])
    assert admin.post("/rules", json=body()).json()["warnings"] == []
