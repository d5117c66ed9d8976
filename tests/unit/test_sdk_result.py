"""`make_result` builds the usual result unchecked (`sdk_result`): it must equal the checked
one field for field, and anything the checks would refuse must still reach them."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from sandbox._errors import ConfigError
from sandbox._models import CommandResult, ResourceUsage, sdk_result
from sandbox._output import OutputCapture
from sandbox._process_base import make_result


def _result(**kw: Any) -> CommandResult:
    capture = OutputCapture(1 << 20)
    capture.feed("stdout", b"out\n")
    capture.feed("stderr", b"err\n")
    args: dict[str, Any] = {"exit_code": 0, "signal": "", "errors": ["", "why"],
                            "timed_out": False, "start_time": datetime.now(UTC),
                            "t0": time.monotonic(), "process_id": 7,
                            "metadata": {"exec_id": "x"},
                            "resource_usage": ResourceUsage(cpu_time=1.5)}
    args.update(kw)
    return make_result(capture, **args)


def _checked(result: CommandResult) -> CommandResult:
    values = {f.alias: getattr(result, f.name) for f in attrs.fields(CommandResult)}
    return CommandResult(**values)


@pytest.mark.parametrize("kw", [{}, {"exit_code": 3}, {"timed_out": True, "exit_code": 137,
                                                       "signal": "SIGKILL"},
                                {"metadata": None}, {"resource_usage": None}])
def test_unchecked_result_equals_checked(kw: dict[str, Any]) -> None:
    result = _result(**kw)
    again = _checked(result)
    assert result == again
    assert repr(result) == repr(again)
    assert result.success is (result.exit_code == 0 and not result.timed_out)
    assert (result.stdout, result.stderr, result.combined) == ("out\n", "err\n", "out\nerr\n")
    assert result.metadata == again.metadata and hash(result.metadata) == hash(again.metadata)
    assert attrs.evolve(result, oom_killed=True).oom_killed


def test_values_the_checks_refuse_still_reach_them() -> None:
    with pytest.raises(ConfigError):
        _result(process_id=-1)
    with pytest.raises(ConfigError):
        _result(metadata={"exec_id": None})
    with pytest.raises(ConfigError):
        _result(success=True, exit_code=1)
    assert _result(success=False).success is False  # kept: Go's zero value


def test_sdk_result_takes_exactly_the_fields() -> None:
    with pytest.raises(TypeError, match="oom_killed"):
        sdk_result(exit_code=0)
