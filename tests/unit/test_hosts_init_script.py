"""The script a fork child's keepalive runs (`sandbox.docker._hosts_init.InitHosts`): the
keepalive's PATH pin comes before anything it looks up (its ``printf`` is a builtin of most
shells, not of all: a program of that name in a PATH directory the sandbox user can write
would run as root), and it ends in the keepalive's own loop (the host views check its
``sleep`` child)."""

from __future__ import annotations

import pytest

from sandbox._constants import ROOT_PATH
from sandbox.docker._hosts_init import InitHosts
from sandbox.docker._keepalive import KEEPALIVE


def test_the_path_pin_comes_first() -> None:
    shell, flag, loop = KEEPALIVE
    pin = loop.split("; ", 1)[0]
    assert pin == f"PATH={ROOT_PATH}"
    assert "$PATH" not in loop, loop  # never the image's PATH (`_keepalive`)
    command = InitHosts(KEEPALIVE).command
    assert command[:2] == (shell, flag)
    script = command[2]
    assert script.startswith(pin + "; "), script
    assert script.endswith(loop.split("; ", 1)[1]), script
    assert script.index(pin) < script.index("printf"), script


def test_a_keepalive_without_the_pin_is_refused() -> None:
    with pytest.raises(ValueError, match="PATH"):
        InitHosts(("/bin/sh", "-c", "while :; do sleep 3600 & wait $!; done"))
