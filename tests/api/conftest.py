from __future__ import annotations

import itertools

import httpx
import pytest

_seq = itertools.count()


class Client:
    """A thin httpx wrapper: one API key, JSON in and out."""

    def __init__(self, base: str, key: str | None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.Client(base_url=base, headers=headers, timeout=30)

    def __getattr__(self, method: str):
        return getattr(self.http, method)


@pytest.fixture
def admin(admin_api: str, admin_key: str) -> Client:
    return Client(admin_api, admin_key)


@pytest.fixture
def anonymous(admin_api: str) -> Client:
    return Client(admin_api, None)


@pytest.fixture
def make_customer(admin: Client, admin_api: str):
    """A new customer with tenants, and a client holding that customer's own key."""

    def make(tenants: list[str] | None = None) -> tuple[dict, Client]:
        n = next(_seq)
        customer = admin.post("/customers", json={"name": f"Customer {n}", "tenants": tenants or []}).json()
        key = admin.post("/api-keys", json={"name": f"k{n}", "scope": "customer", "customer_id": customer["id"]}).json()
        return customer, Client(admin_api, key["key"])

    return make


@pytest.fixture(scope="session")
def catalog(admin_api: str, admin_key: str) -> dict:
    """Tenants t-a (departments d-1, d-2), t-b, t-c and event types order.created / order.paid."""
    admin = Client(admin_api, admin_key)
    tenants = [{"id": "t-a", "subtenants": ["d-1", "d-2"]}, {"id": "t-b"}, {"id": "t-c"}]
    assert admin.put("/tenants", json=tenants).status_code == 200
    for name in ("order.created", "order.paid"):
        admin.post("/event-types", json={"name": name}, headers={"Idempotency-Key": f"et-{name}"})
    return {"tenants": ["t-a", "t-b", "t-c"], "types": ["order.created", "order.paid"]}
