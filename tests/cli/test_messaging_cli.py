"""`wayline publish` and `wayline poll` against the messaging API."""

import orjson
import pytest
from typer.testing import CliRunner

from wayline.cli.main import app
from wayline.messaging.client import MessagingClient

pytestmark = pytest.mark.integration


def test_publish_a_file_then_poll_it_back(messaging_api, admin_key, unique, tmp_path) -> None:
    topic = f"cli.{unique}"
    with MessagingClient(messaging_api, admin_key) as client:
        client.create_topic(topic, partitions=1)
    events = [{"specversion": "1.0", "id": f"l{n}", "source": "/cli", "type": "t", "tenantid": "t-a"} for n in range(5)]
    lines = tmp_path / "events.jsonl"
    lines.write_bytes(b"\n".join(orjson.dumps(e) for e in events + [{"id": "bad"}]))
    runner = CliRunner()
    env = {"WAYLINE_API_KEY": admin_key, "COLUMNS": "250"}

    published = runner.invoke(app, ["publish", topic, str(lines), "--url", messaging_api, "--batch-size", "2",
                                    "--transactional"], env=env)
    assert published.exit_code == 1, published.output
    assert "refused event 1 (id 'bad'): missing CloudEvents attribute(s): specversion, source, type" in published.output
    assert "published 5 of 6 events" in published.output

    polled = runner.invoke(app, ["poll", topic, "--url", messaging_api, "--limit", "3"], env=env)
    assert polled.exit_code == 0, polled.output
    records = [orjson.loads(line) for line in polled.stdout.splitlines()]
    assert [r["event"] for r in records] == events
    assert "next cursor: " in polled.stderr
