"""The command line's parsing and usage errors (sandbox/_cli.py), without an engine."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from sandbox._cli import build_parser, main, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1.5h", 5400),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "h", "-1h", "1h 30m", "1hh"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        parse_duration(text)


def test_parser_gc_options_and_debug_either_side() -> None:
    parser = build_parser()
    args = parser.parse_args(["gc", "--dry-run", "--older-than", "2h", "--debug"])
    assert args.dry_run and args.older_than == timedelta(hours=2) and args.debug
    args = parser.parse_args(["--debug", "gc"])
    assert args.debug and not args.dry_run and args.older_than is None
    assert parser.parse_args(["gc"]).debug is False


def test_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gc", "--older-than", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid duration 'soon'" in err
    assert main([]) == 2
    assert main(["nope"]) == 2
