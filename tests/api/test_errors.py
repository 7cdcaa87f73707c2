"""Errors outside the registry's own: a registry database that cannot be reached is a 503."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import create_engine

from tests.api.servers import served
from wayline.api.app import create_app
from wayline.registry.db import Database
from wayline.stack.process import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def api_without_database(base_settings):
    """The admin API over real HTTP, its registry a real PostgreSQL client aimed where nothing listens."""
    engine = create_engine(f"postgresql+psycopg://wayline@127.0.0.1:{free_port()}/wayline",
                           connect_args={"connect_timeout": 2})
    with served(create_app(base_settings, Database(engine)), health="/openapi.json") as base:
        yield base
    engine.dispose()


@pytest.mark.parametrize("path", ["/customers", "/health"])
def test_an_unreachable_registry_answers_503_with_the_error_shape(api_without_database, path: str) -> None:
    response = httpx.get(f"{api_without_database}{path}", headers={"Authorization": "Bearer wl_key_x_y"}, timeout=30)
    assert (response.status_code, response.headers["Retry-After"]) == (503, "5")
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert error["message"].startswith("the registry database is unreachable")
    assert error["message"].endswith("try again shortly")
