import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException

from wayline.core.errors import ConfigError
from wayline.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_defaults_suit_a_local_run() -> None:
    settings = Settings()
    assert settings.spark.master == "local[2]"
    assert settings.envelope.max_bytes == 1024
    assert settings.stack_file == Path(".wayline/stack.json")


def test_environment_sets_nested_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAYLINE_KAFKA__BOOTSTRAP_SERVERS", "b1:9092,b2:9092")
    monkeypatch.setenv("WAYLINE_ENVELOPE__MAX_BYTES", "4096")
    settings = Settings()
    assert settings.kafka_bootstrap() == "b1:9092,b2:9092"
    assert settings.envelope.max_bytes == 4096


def test_the_stream_fetch_settings_are_librdkafka_properties_it_takes() -> None:
    fetch = Settings().kafka.stream_fetch()
    # librdkafka refuses an unknown property or a value out of its range when the client is made.
    Consumer({"group.id": "settings-check", **fetch}).close()
    with pytest.raises(KafkaException):
        Consumer({"group.id": "settings-check", **fetch, "fetch.wait.max.ms": -1})


def test_the_example_file_is_valid_and_holds_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = Settings()
    monkeypatch.setenv("WAYLINE_CONFIG", str(REPO / "wayline.example.toml"))
    assert Settings() == defaults


@pytest.mark.parametrize("suffix, text", [
    (".toml", 'state_dir = "/srv/wl"\n[kafka]\nquarantine_topic = "q"\n'),
    (".yaml", "state_dir: /srv/wl\nkafka:\n  quarantine_topic: q\n"),
])
def test_config_file_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, text: str) -> None:
    config = tmp_path / f"wayline{suffix}"
    config.write_text(text)
    monkeypatch.setenv("WAYLINE_CONFIG", str(config))
    assert Settings().kafka.quarantine_topic == "q"
    assert Settings().state_dir == Path("/srv/wl")
    monkeypatch.setenv("WAYLINE_KAFKA__QUARANTINE_TOPIC", "from-env")
    assert Settings().kafka.quarantine_topic == "from-env"


def test_a_missing_config_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAYLINE_CONFIG", "/nowhere/wayline.toml")
    with pytest.raises(ConfigError, match="does not name a file"):
        Settings()


def test_unknown_keys_are_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "wayline.toml"
    config.write_text("[kafka]\nbootstrap = 'x'\n")
    monkeypatch.setenv("WAYLINE_CONFIG", str(config))
    with pytest.raises(Exception, match="bootstrap"):
        Settings()


def test_addresses_come_from_the_running_stack(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    with pytest.raises(ConfigError, match="run `wayline up` or set WAYLINE_KAFKA__BOOTSTRAP_SERVERS"):
        settings.kafka_bootstrap()
    settings.stack_file.write_text(json.dumps({"kafka_bootstrap": "127.0.0.1:1", "postgres_dsn": "postgresql://x/y"}))
    assert settings.kafka_bootstrap() == "127.0.0.1:1"
    assert settings.postgres_dsn() == "postgresql://x/y"


@pytest.mark.parametrize("alerts", ["events.alerts.", "events", ""])
def test_the_alert_topics_are_apart_from_the_event_topics(alerts: str) -> None:
    # The rules job reads the event topics: alerts among them would be read back.
    with pytest.raises(ValueError, match="alert_topic_prefix .* must be set and must not overlap event_topic_prefix"):
        Settings(kafka={"alert_topic_prefix": alerts})


def test_a_retry_lease_must_outlive_a_send_stage() -> None:
    # A retry still being sent when its lease ran out would be claimed, and sent, again.
    with pytest.raises(ValueError, match=r"retry_lease_s \(5 s\) must be above stage_deadline_s \(5 s\)"):
        Settings(delivery={"retry_lease_s": 5.0})
    assert Settings(delivery={"retry_lease_s": 5.5}).delivery.retry_lease_s == 5.5
