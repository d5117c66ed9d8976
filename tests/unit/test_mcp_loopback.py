"""Pure logic of sandbox/_mcp_server.py; the server itself is tested end to end in
tests/integration/test_mcp_server.py."""

from __future__ import annotations

import pytest

from sandbox import ConfigError
from sandbox._mcp_server import check_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_is_accepted(host: str) -> None:
    assert check_loopback(host) == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "example.org", ""])
def test_other_addresses_are_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="loopback only"):
        check_loopback(host)
