"""Error answers of the admin API that no well-formed registry produces: the database gone."""

from __future__ import annotations

import httpx

from tests.conftest import served
from wayline.api.app import create_app
from wayline.core.settings import Settings
from wayline.registry.db import Database, make_engine
from wayline.stack.process import free_port


def test_an_unreachable_registry_database_is_a_503_in_the_error_shape(base_settings: Settings) -> None:
    # Nothing listens on this port: every registry call fails to connect.
    engine = make_engine(f"postgresql://wayline@127.0.0.1:{free_port()}/wayline")
    try:
        with served(create_app(base_settings, Database(engine))) as base:
            answer = httpx.get(f"{base}/health", timeout=30)
    finally:
        engine.dispose()
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unavailable"
    assert "unreachable" in error["message"]
