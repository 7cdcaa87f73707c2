"""Where the broker's jars are found, and what a missing folder says."""

import pytest

from tests.conftest import REPO
from wayline.core.errors import MissingJarsError
from wayline.core.settings import Settings
from wayline.stack.kafka import start_broker


def test_the_broker_jars_are_the_checkouts_from_any_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    jars_dir = Settings().stack.broker_jars_dir
    assert jars_dir == REPO / "jars" / "broker"
    assert any(jars_dir.glob("kafka_2.13-*.jar"))


def test_missing_broker_jars_name_the_setting(tmp_path) -> None:
    settings = Settings(state_dir=tmp_path, stack={"broker_jars_dir": tmp_path / "no-jars"})
    with pytest.raises(MissingJarsError, match=r"make jars.*WAYLINE_STACK__BROKER_JARS_DIR"):
        start_broker(settings)
