"""Reference tables through the admin API: rows put and deleted by key, versions, and the
join rules that read them (checked when submitted, and keeping a table from deletion)."""

import itertools

import pytest

pytestmark = pytest.mark.integration

_names = itertools.count()


def error(response) -> tuple[int, str, str]:
    payload = response.json()["error"]
    return response.status_code, payload["code"], payload["message"]


def enrich(table: str) -> dict:
    return {"name": f"ref-rule-{next(_names)}", "output_topic": "rules.out.ref", "output_type": "ref.enriched",
            "sql": f"SELECT e.id, r.data.tier AS tier FROM events e JOIN reference.{table} r ON r.key = e.data.c"}


def test_rows_are_put_replaced_and_deleted_and_each_change_moves_the_version(admin) -> None:
    name = f"tiers_{next(_names)}"
    created = admin.post("/reference-tables", json={"name": name, "description": "customer tiers"})
    assert created.status_code == 201 and created.json()["version"] == 1
    put = admin.put(f"/reference-tables/{name}/rows", json=[
        {"key": "c1", "data": {"tier": "gold"}}, {"key": "c2", "data": {"tier": "silver"}}])
    assert put.json() == {"put": 2}
    assert admin.put(f"/reference-tables/{name}/rows", json=[{"key": "c1", "data": {"tier": "platinum"}}]).status_code == 200
    assert admin.get(f"/reference-tables/{name}/rows/c1").json() == {"key": "c1", "data": {"tier": "platinum"}}
    assert admin.delete(f"/reference-tables/{name}/rows/c2").status_code == 204
    assert error(admin.get(f"/reference-tables/{name}/rows/c2"))[:2] == (404, "not_found")
    assert admin.get(f"/reference-tables/{name}").json()["version"] == 4
    assert name in {t["name"] for t in admin.get("/reference-tables", params={"limit": 500}).json()["data"]}


def test_bad_tables_and_rows_are_refused(admin) -> None:
    name = f"bad_{next(_names)}"
    assert error(admin.post("/reference-tables", json={"name": "has-dash"}))[:2] == (422, "invalid")
    assert admin.post("/reference-tables", json={"name": name}).status_code == 201
    assert error(admin.post("/reference-tables", json={"name": name}))[:2] == (409, "conflict")
    assert error(admin.put(f"/reference-tables/{name}/rows", json=[{"key": "k", "data": [1]}]))[:2] == (422, "invalid")
    assert error(admin.put("/reference-tables/nope/rows", json=[{"key": "k", "data": {}}]))[:2] == (404, "not_found")


def test_a_join_rule_needs_its_reference_table_and_keeps_it_from_deletion(admin) -> None:
    name = f"held_{next(_names)}"
    status, code, message = error(admin.post("/rules", json=enrich(name)))
    assert (status, code) == (422, "invalid")
    assert message.startswith(f"JOIN reference.{name}: there is no reference table {name}; create it first")
    assert admin.post("/reference-tables", json={"name": name}).status_code == 201
    rule = admin.post("/rules", json=enrich(name))
    assert rule.status_code == 201 and rule.json()["kind"] == "join"
    status, code, message = error(admin.delete(f"/reference-tables/{name}"))
    assert (status, code) == (409, "conflict") and rule.json()["name"] in message
    assert admin.delete(f"/rules/{rule.json()['id']}").status_code == 204
    assert admin.delete(f"/reference-tables/{name}").status_code == 204


def test_a_bad_join_is_refused_at_the_api_naming_what_is_wrong(admin) -> None:
    body = enrich("x") | {"sql": "SELECT a.id AS x FROM events a JOIN events b ON a.data.k = b.data.k"}
    status, code, message = error(admin.post("/rules", json=body))
    assert (status, code) == (422, "invalid") and message.startswith("ON: an interval join needs a time bound")
