"""cli.py: argument parsing only: user errors become one line and exit code 2, counts are checked, --help shows the
defaults (read from config/sections.py) and examples, and the choices are the config's own values."""

from __future__ import annotations

import errno

import pytest

from transformer import __version__
from transformer.commands.cli import average_main, evaluate_main, main, translate_main, user_errors_exit_2
from transformer.config import CHUNK_LINES, DecodeConfig, choices
from transformer.errors import UserError


def _raising(exc: BaseException):
    @user_errors_exit_2
    def command(argv=None):
        raise exc

    return command


@pytest.mark.parametrize(
    "exc, code, message",
    [
        (UserError("the config has no data.test split"), 2, "error: the config has no data.test split\n"),
        (OSError(errno.ENOSPC, "No space left on device", "out.txt"), 2, "No space left on device"),
        (KeyboardInterrupt(), 130, "interrupted (SIGINT); files being written were not replaced\n"),
    ],
)
def test_errors_become_one_line_and_an_exit_code(exc, code, message, capsys):
    assert _raising(exc)([]) == code
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_bug_is_not_hidden():
    with pytest.raises(ZeroDivisionError):
        _raising(ZeroDivisionError())([])


@pytest.mark.parametrize(
    "command, argv, message",
    [
        (translate_main, ["--checkpoint", "c.pt", "--chunk-lines", "0"], "must be >= 1, got 0"),
        (translate_main, ["--checkpoint", "c.pt", "--threads", "two"], "must be an integer, got 'two'"),
        (translate_main, ["--checkpoint", "c.pt", "--length-penalty", "wu"], "invalid choice: 'wu' (choose from"),
        (evaluate_main, ["--precision", "fp8"], "invalid choice: 'fp8' (choose from"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(command, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        command(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("flag, field", [("--length-penalty", "length_penalty"), ("--precision", "precision")])
def test_choices_are_the_configs(flag, field, capsys):
    """The flags offer exactly the values of DecodeConfig's Literal fields (no list of its own to drift)."""
    with pytest.raises(SystemExit):
        translate_main(["--help"])
    names = ",".join(choices(DecodeConfig, field))
    assert f"{flag} {{{names}}}" in capsys.readouterr().out
    assert "gnmt" in choices(DecodeConfig, "length_penalty") and "bf16" in choices(DecodeConfig, "precision")


def test_help_shows_defaults_and_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        translate_main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert f"(default: {CHUNK_LINES})" in out and "examples:" in out and "transformer/config/sections.py" in out
    assert "--nbest" in out and "--precision {auto,bf16,fp16,fp32}" in out


@pytest.mark.parametrize("command", [average_main, translate_main])
def test_version(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        command(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.split()[-1] == __version__


COMMAND_NAMES = [
    "prepare",
    "train",
    "translate",
    "evaluate",
    "score",
    "average",
    "calibrate",
    "export",
    "import",
    "distill",
    "serve",
    "keys",
]


def _listed_commands(text: str) -> list[str]:
    """The first word of each line of the help's 'commands:' paragraph, in order."""
    section = text.split("commands:\n", 1)[1].split("\n\n")[0]
    return [line.split()[0] for line in section.splitlines()]


def test_help_lists_every_command_with_one_line_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert _listed_commands(out) == COMMAND_NAMES  # one line each


def test_without_a_command_the_same_list_and_exit_2(capsys):
    assert main([]) == 2
    assert _listed_commands(capsys.readouterr().err) == COMMAND_NAMES


def test_an_unknown_command_is_refused_with_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


def test_a_command_runs_through_the_dispatcher(capsys):
    assert main(["train", "--config", "tiny", "--print-config"]) == 0
    assert "d_model:" in capsys.readouterr().out
