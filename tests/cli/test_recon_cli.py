"""An operator sets up a reconciliation and reads its status from the CLI."""

import re

import pytest
from typer.testing import CliRunner

from wayline.cli.main import app

pytestmark = pytest.mark.integration


def test_create_list_change_and_status(settings, database) -> None:
    runner = CliRunner()
    env = {"WAYLINE_STATE_DIR": str(settings.state_dir), "COLUMNS": "250"}

    def wayline(*args: str, ok: bool = True) -> str:
        result = runner.invoke(app, list(args), env=env)
        assert (result.exit_code == 0) == ok, result.output
        return " ".join(result.output.split())

    created = wayline("recon", "create", "cli-orders", "--expected-topic", "audit.orders",
                      "--expected-id", "data.event_id", "--actual-pattern", "events\\.orders\\..*",
                      "--o", "60", "--n", "10", "--m", "600", "--z", "120")
    recon_id = re.search(r"rec_[a-z0-9]+", created).group(0)
    assert recon_id in wayline("recon", "list")
    assert "error: periods: n (900 s) may not exceed m (600 s)" in wayline(
        "recon", "periods", recon_id, "--o", "60", "--n", "900", "--m", "600", "--z", "120", ok=False)
    changed = wayline("recon", "periods", recon_id, "--o", "30", "--n", "5", "--m", "300", "--z", "60")
    assert f"{recon_id} │ cli-orders │ {settings.recon.output_topic} │ True │ 2" in changed
    status = wayline("recon", "status", recon_id)
    assert "cli-orders: watermark none yet, 0 missing now" in status
    assert "disabled" in wayline("recon", "disable", recon_id)
    wayline("recon", "delete", recon_id)
    assert "not found" in wayline("recon", "status", recon_id, ok=False)
