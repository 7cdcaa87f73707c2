"""`wayline publish` and `wayline poll` against the messaging API."""

import orjson
import pytest
from typer.testing import CliRunner

from wayline.cli.main import app
from wayline.messaging.client import MessagingClient

pytestmark = pytest.mark.integration


def cloud_event(n: int) -> dict:
    return {"specversion": "1.0", "id": f"l{n}", "source": "/cli", "type": "t", "tenantid": "t-a"}


def polled(runner: CliRunner, topic: str, url: str, env: dict[str, str]) -> list[dict]:
    result = runner.invoke(app, ["poll", topic, "--url", url, "--limit", "1000"], env=env)
    assert result.exit_code == 0, result.output
    return [orjson.loads(line)["event"] for line in result.stdout.splitlines()]


@pytest.fixture
def topic(messaging_api, admin_key, unique) -> str:
    name = f"cli.{unique}"
    with MessagingClient(messaging_api, admin_key) as client:
        client.create_topic(name, partitions=1)
    return name


def test_publish_a_file_then_poll_it_back(messaging_api, admin_key, topic, tmp_path) -> None:
    events = [cloud_event(n) for n in range(5)]
    lines = tmp_path / "events.jsonl"
    lines.write_bytes(b"\n".join(orjson.dumps(e) for e in events + [{"id": "bad"}]))
    runner = CliRunner()
    env = {"WAYLINE_API_KEY": admin_key, "COLUMNS": "250"}

    published = runner.invoke(app, ["publish", topic, str(lines), "--url", messaging_api, "--batch-size", "2"],
                              env=env)
    assert published.exit_code == 1, published.output
    assert "refused line 6 (id 'bad'): missing CloudEvents attribute(s): specversion, source, type" in published.output
    assert "published 5 of 6 events" in published.output

    result = runner.invoke(app, ["poll", topic, "--url", messaging_api, "--limit", "3"], env=env)
    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [r["event"] for r in records] == events
    assert "next cursor: " in result.stderr


def test_a_transactional_publish_writes_all_or_none_and_names_the_line(messaging_api, admin_key, topic,
                                                                      tmp_path) -> None:
    """251 lines, the last one invalid: the first 250 go in batches of 100 before it is refused."""
    runner = CliRunner()
    env = {"WAYLINE_API_KEY": admin_key, "COLUMNS": "250"}
    lines = tmp_path / "events.jsonl"
    bad = cloud_event(250) | {"tenantid": ""}
    lines.write_bytes(b"\n".join(orjson.dumps(e) for e in [cloud_event(n) for n in range(250)] + [bad]))

    refused = runner.invoke(app, ["publish", topic, str(lines), "--url", messaging_api, "--transactional"], env=env)
    assert refused.exit_code == 1, refused.output
    assert "refused line 251 (id 'l250'): " in refused.output
    assert "event 50" not in refused.output
    assert "published 0 of 251 events" in refused.output
    assert polled(runner, topic, messaging_api, env) == []

    # A JSON array is named by position; the whole array written at once when all is well.
    array = tmp_path / "events.json"
    array.write_bytes(orjson.dumps([cloud_event(n) for n in range(3)] + [{"id": "x"}]))
    refused = runner.invoke(app, ["publish", topic, str(array), "--url", messaging_api, "--transactional"], env=env)
    assert "refused event 4 of the input (id 'x'): " in refused.output
    array.write_bytes(orjson.dumps([cloud_event(n) for n in range(3)]))
    written = runner.invoke(app, ["publish", topic, str(array), "--url", messaging_api, "--transactional",
                                  "--batch-size", "2"], env=env)
    assert written.exit_code == 0, written.output
    assert [e["id"] for e in polled(runner, topic, messaging_api, env)] == ["l0", "l1", "l2"]


def test_a_line_that_is_not_json_is_named(messaging_api, admin_key, topic, tmp_path) -> None:
    lines = tmp_path / "events.jsonl"
    lines.write_bytes(orjson.dumps(cloud_event(1)) + b"\n\n{not json\n")
    result = CliRunner().invoke(app, ["publish", topic, str(lines), "--url", messaging_api],
                                env={"WAYLINE_API_KEY": admin_key, "COLUMNS": "250"})
    assert result.exit_code == 1
    assert "error: line 3 is not JSON: " in result.output
