"""`wayline status` on the running stack: the stack's processes, then the delivery self-audit."""

import re

import pytest
from typer.testing import CliRunner

from wayline.cli.main import app

pytestmark = pytest.mark.integration


def test_status_shows_the_stack_and_the_delivery_self_audit(settings, database) -> None:
    from wayline.recon import self_audit

    self_audit.ensure(database, settings)
    result = CliRunner().invoke(app, ["status"], env={"WAYLINE_STATE_DIR": str(settings.state_dir),
                                                     "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "Wayline local stack" in output
    # The count depends on what other tests fed the session's self-audit before this one.
    assert re.search(r"delivery self-audit \(delivery-self-audit\): \d+ records without an outcome now", output)
