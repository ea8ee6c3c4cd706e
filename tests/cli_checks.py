"""What every CLI refusal must look like, for the commands' tests."""

from __future__ import annotations

from typing import Any


def assert_one_line_error(result: Any, *fragments: str) -> None:
    """A ``CliRunner`` result that refused as the CLI refuses bad input: exit 2, no traceback, nothing on stdout, one
    ``error:`` line on stderr (no progress bar drawn before it) holding every fragment."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
