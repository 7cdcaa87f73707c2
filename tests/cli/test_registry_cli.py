"""An operator builds a customer, an endpoint and subscriptions of all three levels from the CLI."""

import re

import pytest
from typer.testing import CliRunner

from wayline.cli.main import app

pytestmark = pytest.mark.integration


@pytest.fixture
def wayline(settings, database):
    runner = CliRunner()
    env = {"WAYLINE_STATE_DIR": str(settings.state_dir), "WAYLINE_REGISTRY__URL_ALLOW_LIST": '["127.0.0.1/32"]',
           "COLUMNS": "250"}

    def run(*args: str, ok: bool = True) -> str:
        result = runner.invoke(app, list(args), env=env)
        assert (result.exit_code == 0) == ok, result.output
        return " ".join(result.output.split())

    return run


def first(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    assert match, text
    return match.group(0)


def test_operator_walkthrough(wayline) -> None:
    wayline("tenants", "add", "t-cli", "--subtenant", "d-100", "--subtenant", "d-200")
    wayline("event-types", "add", "cli.invoice.paid")
    customer = first(r"cus_[a-z0-9]+", wayline("customers", "create", "CLI Co", "--tenant", "t-cli"))
    key = wayline("keys", "create", "cli key", "--customer", customer)
    assert first(r"wl_key_\S+", key)
    endpoint_out = wayline("endpoints", "create", "http://127.0.0.1:9/cli", "--customer", customer, "--bearer", "tok")
    endpoint = first(r"ep_[a-z0-9]+", endpoint_out)
    assert first(r"whsec_\S+", endpoint_out)
    assert "tok" not in endpoint_out.replace(endpoint, "")

    whole = wayline("subscriptions", "create", "--endpoint", endpoint, "--type", "cli.invoice.paid")
    listed = wayline("subscriptions", "create", "--endpoint", endpoint, "--type", "cli.invoice.paid",
                     "--tenant", "t-cli", "--filter", '{"data.amount": {"$gt": 5}}', "--batch", "--max-count", "50")
    pairs = wayline("subscriptions", "create", "--endpoint", endpoint, "--type", "cli.invoice.paid",
                    "--subtenant", "t-cli/d-100")
    assert "all" in whole and '"$gt":5' in listed and "batch" in listed and '["t-cli","d-100"]' in pairs
    table = wayline("subscriptions", "list", "--endpoint", endpoint)
    assert len(re.findall(r"sub_[a-z0-9]+", table)) == 3
    assert endpoint in wayline("endpoints", "list", "--limit", "500")
    assert "disabled by an operator" in wayline("endpoints", "disable", endpoint)


def test_errors_are_one_readable_line(wayline) -> None:
    customer = first(r"cus_[a-z0-9]+", wayline("customers", "create", "Err Co"))
    assert "not a public address (private)" in wayline("endpoints", "create", "http://10.0.0.1/x", "--customer", customer, ok=False)
    endpoint = first(r"ep_[a-z0-9]+", wayline("endpoints", "create", "http://127.0.0.1:9/e", "--customer", customer))
    out = wayline("subscriptions", "create", "--endpoint", endpoint, "--type", "no.such.type", ok=False)
    assert "error: event_types: unknown event type(s) no.such.type" in out and "Traceback" not in out
    out = wayline("subscriptions", "create", "--endpoint", endpoint, "--type", "x", "--filter", "{nope", ok=False)
    assert "--filter is not JSON" in out


def test_a_subscription_disabled_by_410_shows_why_in_the_listings(wayline, database) -> None:
    from wayline.pipelines.delivery import GONE_REASON, disable_gone

    wayline("event-types", "add", "cli.gone")
    customer = first(r"cus_[a-z0-9]+", wayline("customers", "create", "Gone Co"))
    endpoint = first(r"ep_[a-z0-9]+", wayline("endpoints", "create", "http://127.0.0.1:9/gone", "--customer", customer))
    sub = first(r"sub_[a-z0-9]+", wayline("subscriptions", "create", "--endpoint", endpoint, "--type", "cli.gone"))
    disable_gone(database, {sub})
    assert GONE_REASON in wayline("subscriptions", "list", "--endpoint", endpoint)
    assert f"{sub}: {GONE_REASON} at " in wayline("endpoints", "show", endpoint)


def test_a_reference_table_is_created_and_loaded_from_json_lines(wayline, database, tmp_path) -> None:
    from wayline.registry import reference
    from wayline.registry.access import ADMIN

    rows = tmp_path / "tiers.jsonl"
    # More rows than one put takes: the load is cut into puts, all in one transaction.
    rows.write_text("".join(f'{{"key": "c{n}", "data": {{"tier": {n % 3}}}}}\n' for n in range(25_000)))
    wayline("rules", "reference", "create", "cli_tiers", "--description", "tiers")
    assert "25,000 rows put into reference table cli_tiers; now at version 4" in wayline(
        "rules", "reference", "load", "cli_tiers", str(rows))
    with database.transaction() as session:
        assert reference.get_row(session, ADMIN, "cli_tiers", "c24999").data == {"tier": 0}
    rows.write_text('{"key": "c1", "data": [1]}\n')
    assert "data" in wayline("rules", "reference", "load", "cli_tiers", str(rows), ok=False)
