"""What `snowsource --help`, `-V` and the per-command help tell a new user."""

from __future__ import annotations

import pytest

from snowsource import __version__
from snowsource.cli.main import main


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flag(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    assert _out(capsys, flag) == (0, f"snowsource {__version__}\n")


def test_top_level_help_lists_commands_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _out(capsys, "--help")
    assert code == 0
    for command in ("run", "check", "offsets", "emulator"):
        assert f"    {command}" in text
    assert "exit codes:" in text
    for exit_code in ("0  clean shutdown", "1  fatal runtime error", "2  invalid configuration"):
        assert exit_code in text


@pytest.mark.parametrize(
    ("command", "described"),
    [
        ("run", "Run the daemon in the foreground"),
        ("check", "Validate the configuration, then check Kafka"),
    ],
)
def test_run_and_check_help_describe_the_command(
    capsys: pytest.CaptureFixture[str], command: str, described: str
) -> None:
    code, text = _out(capsys, command, "--help")
    assert code == 0
    assert described in text
    assert "exit codes:" in text
    assert "--config" in text


def test_run_help_offers_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    _, text = _out(capsys, "run", "--help")
    assert "--log-level LEVEL" in text


@pytest.mark.parametrize("level", ["verbose", "", "5"])
def test_an_unknown_log_level_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], level: str
) -> None:
    code, text = _out(capsys, "run", "--log-level", level)
    assert code == 2
    assert "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in text


def test_emulator_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _out(capsys, "emulator", "--help")
    assert code == 0
    text = " ".join(text.split())
    for default in (
        "(default: 127.0.0.1)",
        "(default: 8080)",
        "(default: incident,change_request,cmdb_ci)",
        "(default: 1000)",
        "(default: admin)",
        "(default: America/Los_Angeles)",
    ):
        assert default in text
