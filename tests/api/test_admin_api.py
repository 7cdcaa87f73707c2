"""The admin API over real HTTP against the real PostgreSQL registry."""

import pytest

pytestmark = pytest.mark.integration

RECEIVER = "http://127.0.0.1:9/hook"  # loopback: admitted by the tests' allow-list


def version(admin) -> int:
    return admin.get("/health").json()["registry_version"]


def error(response) -> tuple[int, str, str]:
    body = response.json()["error"]
    return response.status_code, body["code"], body["message"]


def test_openapi_is_served(anonymous) -> None:
    assert anonymous.get("/docs").status_code == 200
    paths = anonymous.get("/openapi.json").json()["paths"]
    assert {"/customers", "/endpoints", "/subscriptions", "/tenants", "/event-types", "/api-keys"} <= set(paths)


def test_every_object_has_a_lifecycle_and_every_change_bumps_the_version(admin, catalog) -> None:
    v0 = version(admin)
    customer = admin.post("/customers", json={"name": "Acme", "tenants": ["t-a"]}).json()
    v1 = version(admin)
    assert v1 > v0
    assert admin.get(f"/customers/{customer['id']}").json()["name"] == "Acme"
    assert admin.patch(f"/customers/{customer['id']}", json={"name": "Acme Ltd"}).json()["name"] == "Acme Ltd"
    v2 = version(admin)
    assert v2 > v1

    endpoint = admin.post("/endpoints", json={"url": RECEIVER, "customer_id": customer["id"]}).json()
    assert endpoint["enabled"] and endpoint["auth"] == {"kind": "none"}
    v3 = version(admin)
    assert v3 > v2
    sub = admin.post("/subscriptions", json={
        "endpoint_id": endpoint["id"], "event_types": ["order.paid"], "tenant_scope": "tenants",
        "tenants": ["t-a"], "filter": {"data.amount": {"$gte": 100}}, "mode": "batch",
    }).json()
    assert (sub["max_count"], sub["max_wait_ms"], sub["customer_id"]) == (100, 1000, customer["id"])
    v4 = version(admin)
    assert v4 > v3
    changed = admin.patch(f"/subscriptions/{sub['id']}", json={"mode": "streaming", "enabled": False}).json()
    assert (changed["mode"], changed["max_count"], changed["enabled"]) == ("streaming", None, False)
    v5 = version(admin)
    assert v5 > v4
    disabled = admin.patch(f"/endpoints/{endpoint['id']}", json={"enabled": False, "disabled_reason": "maintenance"}).json()
    assert (disabled["enabled"], disabled["disabled_reason"]) == (False, "maintenance")
    assert disabled["disabled_at"] is not None
    v6 = version(admin)
    assert v6 > v5

    assert admin.delete(f"/subscriptions/{sub['id']}").status_code == 204
    assert admin.get(f"/subscriptions/{sub['id']}").status_code == 404
    assert admin.delete(f"/endpoints/{endpoint['id']}").status_code == 204
    assert admin.delete(f"/customers/{customer['id']}").status_code == 204
    assert admin.get(f"/customers/{customer['id']}").status_code == 404
    assert version(admin) > v6


def test_catalog_lifecycle(admin) -> None:
    assert admin.put("/tenants", json=[{"id": "t-life", "name": "Life", "subtenants": ["d-9"]}]).json() == {"upserted": 1}
    assert admin.get("/tenants/t-life").json()["subtenants"] == ["d-9"]
    assert admin.put("/tenants", json=[{"id": "t-life", "subtenants": []}]).status_code == 200
    assert admin.get("/tenants/t-life").json()["subtenants"] == []
    assert admin.delete("/tenants/t-life").status_code == 204
    created = admin.post("/event-types", json={"name": "life.cycle", "json_schema": {"type": "object"}})
    assert created.status_code == 201
    assert error(admin.post("/event-types", json={"name": "life.cycle"}))[:2] == (409, "conflict")
    assert admin.delete("/event-types/life.cycle").status_code == 204


def test_lists_page_with_a_cursor(admin) -> None:
    made = [admin.post("/customers", json={"name": f"Paged {i}"}).json()["id"] for i in range(5)]
    seen, cursor = [], None
    while True:
        page = admin.get("/customers", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        assert len(page["data"]) <= 2
        seen += [c["id"] for c in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(seen) and set(made) <= set(seen)
    assert error(admin.get("/customers", params={"cursor": "%%%"}))[:2] == (422, "invalid")
    assert error(admin.get("/customers", params={"limit": 100_000}))[2] == "limit: must be between 1 and 500"


def test_idempotent_create(admin) -> None:
    body = {"name": "Once"}
    first = admin.post("/customers", json=body, headers={"Idempotency-Key": "idem-1"})
    again = admin.post("/customers", json=body, headers={"Idempotency-Key": "idem-1"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json() and again.headers["Idempotent-Replayed"] == "true"
    other = admin.post("/customers", json={"name": "Twice"}, headers={"Idempotency-Key": "idem-1"})
    assert error(other) == (409, "conflict", "this Idempotency-Key was used with a different request body")


@pytest.mark.parametrize("body, message", [
    ({"event_types": []}, "event_types: List should have at least 1 item after validation, not 0"),
    ({"event_types": ["order.paid"], "tenant_scope": "tenants"}, "tenant_scope 'tenants' needs a non-empty tenants list and no subtenants"),
    ({"event_types": ["order.paid"], "mode": "streaming", "max_count": 5}, "max_count and max_wait_ms apply to mode 'batch' only"),
    ({"event_types": ["nope.type"]}, "event_types: unknown event type(s) nope.type"),
    ({"event_types": ["order.paid"], "tenant_scope": "tenants", "tenants": ["t-zz"]}, "tenants: unknown tenant(s) t-zz"),
    ({"event_types": ["order.paid"], "tenant_scope": "subtenants", "subtenants": [["t-a", "d-9"]]}, "subtenants: unknown sub-tenant(s) t-a/d-9"),
    ({"event_types": ["order.paid"], "mode": "batch", "max_count": 0}, "max_count: Input should be greater than or equal to 1"),
    ({"event_types": ["order.paid"], "colour": "red"}, "colour: Extra inputs are not permitted"),
])
def test_invalid_subscriptions_are_rejected_with_the_reason(admin, catalog, body, message) -> None:
    customer = admin.post("/customers", json={"name": "Val"}).json()
    endpoint = admin.post("/endpoints", json={"url": RECEIVER, "customer_id": customer["id"]}).json()
    status, code, text = error(admin.post("/subscriptions", json={"endpoint_id": endpoint["id"], **body}))
    assert (status, code) == (422, "invalid")
    assert message in text


def test_an_invalid_filter_names_the_bad_operator(admin, catalog) -> None:
    customer = admin.post("/customers", json={"name": "Filt"}).json()
    endpoint = admin.post("/endpoints", json={"url": RECEIVER, "customer_id": customer["id"]}).json()
    response = admin.post("/subscriptions", json={
        "endpoint_id": endpoint["id"], "event_types": ["order.paid"],
        "filter": {"$or": [{"data.currency": "EUR"}, {"data.currency": {"$inn": ["USD"]}}]},
    })
    status, code, text = error(response)
    assert (status, code) == (422, "invalid") and "$inn" in text


def test_authentication(anonymous, admin, admin_api) -> None:
    from tests.api.conftest import Client

    assert error(anonymous.get("/customers"))[:2] == (401, "unauthorized")
    assert anonymous.get("/customers").headers["WWW-Authenticate"] == "Bearer"
    assert error(Client(admin_api, "wl_key_nothing_secret").get("/customers"))[:2] == (401, "unauthorized")
    made = admin.post("/api-keys", json={"name": "short-lived", "scope": "admin"}).json()
    short = Client(admin_api, made["key"])
    assert short.get("/customers").status_code == 200
    assert admin.post(f"/api-keys/{made['id']}/revoke").json()["revoked_at"] is not None
    assert error(short.get("/customers")) == (401, "unauthorized", "this API key was revoked")
    listed = admin.get("/api-keys", params={"limit": 500}).json()["data"]
    assert all("key" not in k and "secret_hash" not in k for k in listed)


def test_customer_keys_see_only_their_own(admin, make_customer, catalog) -> None:
    alice, alice_api = make_customer(["t-a"])
    bob, bob_api = make_customer(["t-b"])
    ep = alice_api.post("/endpoints", json={"url": RECEIVER}).json()
    assert ep["customer_id"] == alice["id"]
    sub = alice_api.post("/subscriptions", json={
        "endpoint_id": ep["id"], "event_types": ["order.paid"], "tenant_scope": "tenants", "tenants": ["t-a"],
    }).json()

    # Bob cannot see, change or delete Alice's objects: they look missing, not forbidden.
    for path in (f"/endpoints/{ep['id']}", f"/subscriptions/{sub['id']}", f"/customers/{alice['id']}",
                 f"/endpoints/{ep['id']}/secrets"):
        assert error(bob_api.get(path))[:2] == (404, "not_found")
    assert bob_api.patch(f"/endpoints/{ep['id']}", json={"description": "x"}).status_code == 404
    assert bob_api.delete(f"/subscriptions/{sub['id']}").status_code == 404
    assert bob_api.post("/subscriptions", json={"endpoint_id": ep["id"], "event_types": ["order.paid"]}).status_code == 404
    assert [e["id"] for e in bob_api.get("/endpoints").json()["data"]] == []
    assert [e["id"] for e in alice_api.get("/endpoints").json()["data"]] == [ep["id"]]
    assert bob_api.post("/endpoints", json={"url": RECEIVER, "customer_id": alice["id"]}).status_code == 404

    # Scope limits: admin-only operations and tenants the customer does not own.
    assert error(bob_api.post("/customers", json={"name": "x"}))[:2] == (403, "forbidden")
    assert error(bob_api.get("/tenants"))[:2] == (403, "forbidden")
    bob_ep = bob_api.post("/endpoints", json={"url": RECEIVER}).json()
    assert error(bob_api.post("/subscriptions", json={
        "endpoint_id": bob_ep["id"], "event_types": ["order.paid"], "tenant_scope": "tenants", "tenants": ["t-a"],
    }))[:2] == (403, "forbidden")
    assert error(bob_api.post("/subscriptions", json={"endpoint_id": bob_ep["id"], "event_types": ["order.paid"]}))[2] \
        == "tenant_scope 'all' needs an admin key; list the tenants instead"


@pytest.mark.parametrize("url, problem", [
    ("ftp://example.com/x", "scheme must be http or https"),
    ("http://10.1.2.3/hook", "not a public address (private)"),
    ("http://169.254.169.254/latest/meta-data", "not a public address (link-local)"),
    ("http://[::1]:8080/hook", "not a public address (loopback)"),
    ("http://192.168.0.10/hook", "not a public address (private)"),
    # NAT64 and 6to4 forms of loopback, which Python calls global; 127.0.0.1/32 admits neither.
    ("http://[64:ff9b::7f00:1]/hook", "(loopback: it embeds 127.0.0.1)"),
    ("http://[2002:7f00:1::]/hook", "(loopback: it embeds 127.0.0.1)"),
    ("http://[ff02::1]/hook", "(multicast)"),
    ("http://user:pw@example.com/hook", "credentials in the URL"),
    ("http://127.0.0.1:9/hook\r\nX-Injected: 1", "control character '\\r'"),
    ("http://127.0.0.1:9/a\tb", "control character '\\t'"),
])
def test_endpoint_urls_that_reach_inside_are_refused(admin, url, problem) -> None:
    customer = admin.post("/customers", json={"name": "ssrf"}).json()
    status, code, text = error(admin.post("/endpoints", json={"url": url, "customer_id": customer["id"]}))
    assert (status, code) == (422, "invalid") and problem in text


def test_the_allow_list_admits_loopback(admin) -> None:
    customer = admin.post("/customers", json={"name": "allowed"}).json()
    assert admin.post("/endpoints", json={"url": "http://127.0.0.1:8080/x", "customer_id": customer["id"]}).status_code == 201
    assert admin.post("/endpoints", json={"url": "http://localhost:8080/x", "customer_id": customer["id"]}).status_code == 201


def test_an_endpoint_keeps_its_own_retry_policy_until_reset(admin) -> None:
    customer = admin.post("/customers", json={"name": "retry-policy"}).json()
    made = admin.post("/endpoints", json={"url": RECEIVER, "customer_id": customer["id"],
                                          "retry_schedule_s": [0, 10, 60], "retry_statuses": [404, 400, 404]}).json()
    assert (made["retry_schedule_s"], made["retry_statuses"]) == ([0, 10, 60], [400, 404])
    path = f"/endpoints/{made['id']}"
    assert admin.patch(path, json={"retry_schedule_s": None}).json()["retry_schedule_s"] is None
    assert admin.get(path).json()["retry_statuses"] == [400, 404], "a patch changes only what it names"
    for body, problem in (({"retry_statuses": [410]}, "410 Gone always disables"),
                          ({"retry_statuses": [503]}, "less than or equal to 499"),
                          ({"retry_schedule_s": []}, "at least 1 item"),
                          ({"retry_schedule_s": [0, -5]}, "greater than or equal to 0")):
        status, code, text = error(admin.patch(path, json=body))
        assert (status, code) == (422, "invalid") and problem in text, (body, text)


def test_credentials_are_stored_encrypted_and_never_returned(admin, database) -> None:
    from sqlalchemy import text

    customer = admin.post("/customers", json={"name": "creds"}).json()
    made = admin.post("/endpoints", json={
        "url": RECEIVER, "customer_id": customer["id"],
        "auth": {"kind": "oauth2", "token_url": "http://127.0.0.1:9/token", "client_id": "cid",
                 "client_secret": "s3cr3t-value", "scope": "hooks"},
    }).json()
    assert made["auth"] == {"kind": "oauth2", "token_url": "http://127.0.0.1:9/token", "client_id": "cid",
                            "scope": "hooks", "audience": None}
    with database.engine.connect() as conn:
        stored = conn.execute(text("SELECT auth_encrypted FROM endpoints WHERE id = :id"), {"id": made["id"]}).scalar()
        secrets = conn.execute(text("SELECT secret_encrypted FROM signing_secrets WHERE endpoint_id = :id"),
                               {"id": made["id"]}).scalars().all()
    assert b"s3cr3t-value" not in stored and all(b"whsec_" not in s for s in secrets)
    assert "s3cr3t-value" not in admin.get(f"/endpoints/{made['id']}").text


def test_signing_secret_rotation_keeps_the_old_secret_for_the_overlap(admin, make_customer) -> None:
    customer, customer_api = make_customer()
    given = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    ep = customer_api.post("/endpoints", json={"url": RECEIVER, "secret": given}).json()
    first = customer_api.get(f"/endpoints/{ep['id']}/secrets").json()
    assert [s["secret"] for s in first] == [given] and first[0]["expires_at"] is None
    rotated = customer_api.post(f"/endpoints/{ep['id']}/secrets/rotate", json={}).json()
    assert len(rotated) == 2
    # By content: the two may share a creation time, so their order is not the test's.
    (old,) = [s for s in rotated if s["secret"] == given]
    (new,) = [s for s in rotated if s is not old]
    assert new["secret"].startswith("whsec_") and new["secret"] != given and new["expires_at"] is None
    assert old["secret"] == given and old["expires_at"] is not None
    bad = customer_api.post(f"/endpoints/{ep['id']}/secrets/rotate", json={"secret": "plain"})
    assert error(bad)[:2] == (422, "invalid") and "whsec_" in error(bad)[2]


def test_a_subscription_disabled_by_410_shows_why_on_itself_and_its_endpoint(admin, make_customer, catalog,
                                                                            database) -> None:
    from wayline.pipelines.delivery import GONE_REASON, disable_gone

    _, client = make_customer(["t-a"])
    endpoint = client.post("/endpoints", json={"url": RECEIVER}).json()
    sub = client.post("/subscriptions", json={"endpoint_id": endpoint["id"], "event_types": ["order.paid"],
                                              "tenant_scope": "tenants", "tenants": ["t-a"]}).json()
    assert (sub["disabled_reason"], sub["disabled_at"]) == (None, None)
    assert client.get(f"/endpoints/{endpoint['id']}").json()["disabled_subscriptions"] == []

    disable_gone(database, {sub["id"]})  # what the delivery job does after a 410 Gone

    gone = client.get(f"/subscriptions/{sub['id']}").json()
    assert (gone["enabled"], gone["disabled_reason"]) == (False, GONE_REASON) and gone["disabled_at"]
    shown = client.get(f"/endpoints/{endpoint['id']}").json()
    assert shown["enabled"] is True
    assert shown["disabled_subscriptions"] == [
        {"id": sub["id"], "disabled_reason": GONE_REASON, "disabled_at": gone["disabled_at"]}]
    listed = [e for e in client.get("/endpoints").json()["data"] if e["id"] == endpoint["id"]]
    assert listed[0]["disabled_subscriptions"][0]["disabled_reason"] == GONE_REASON

    again = client.patch(f"/subscriptions/{sub['id']}", json={"enabled": True}).json()
    assert (again["enabled"], again["disabled_reason"], again["disabled_at"]) == (True, None, None)
    assert client.get(f"/endpoints/{endpoint['id']}").json()["disabled_subscriptions"] == []
    paused = client.patch(f"/subscriptions/{sub['id']}", json={"enabled": False}).json()
    assert paused["disabled_reason"] == "disabled by the customer"
