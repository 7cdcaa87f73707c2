"""`wayline keys create` shows the new key whole, on its own line, however narrow the terminal."""

import re

import pytest
from typer.testing import CliRunner

from wayline.cli.main import app
from wayline.registry import api_key

pytestmark = pytest.mark.integration


def test_a_new_key_is_shown_whole_on_its_own_line_in_a_narrow_terminal(settings, database) -> None:
    result = CliRunner().invoke(app, ["keys", "create", "a rather long key name for a narrow terminal"],
                                env={"WAYLINE_STATE_DIR": str(settings.state_dir), "COLUMNS": "40"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    [key] = [line for line in lines if line.startswith("wl_key_")]
    key_id = re.search(r"\bkey_[a-z0-9]+", lines[0])
    assert key_id is not None and len(key) > 40
    # Whole: the key as printed is the one that authenticates, as the id printed.
    with database.transaction() as session:
        assert api_key.authenticate(session, key).key_id == key_id.group(0)
