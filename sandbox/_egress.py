"""The egress policy: which destinations a networked sandbox may reach, and why not.

One policy comes from both places a config may name hosts (``security.allowed_hosts`` /
``blocked_hosts`` / ``allowed_ports`` and the same ``network`` fields): their union. The
SDK's egress proxy applies it to every request, in this order, and a refusal names the rule:

1. ``allowed_ports``: the destination port must be listed (default 80 and 443);
2. ``blocked_hosts``: a name matching one of them is refused;
3. ``allowed_hosts``: the name must match one (``"*"`` matches every name);
4. ``private_address``: every address the name resolved to must be public (see `is_public`:
   not loopback, private, link-local such as 169.254.169.254, CGNAT, IPv6 unique-local or
   link-local, multicast or reserved, nor IPv6 that carries such an IPv4 address: mapped,
   compatible, NAT64, 6to4, Teredo), unless that exact address is listed in
   ``allowed_hosts``. The proxy then connects to the address it checked, never resolving
   the name again, so DNS rebinding cannot slip past the check.

Then the name used must be the name checked (`sandbox._egress_proxy`): ``host_header`` (a
``Host`` header naming another site) and ``sni`` (a TLS ClientHello naming another server).

Patterns: an exact name (``pypi.org``), ``*.domain`` (every name below ``domain``, not
``domain`` itself), ``*`` (any name), or an IP address (that address).

Stdlib only, on purpose: the proxy container runs this module's source with a bare
``python3`` (see `sandbox._egress_proxy`), where attrs is not installed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_PORTS", "Decision", "EgressPolicy", "is_public", "normalize_host",
]

#: Ports allowed when no ``allowed_ports`` are given: plain and TLS HTTP.
DEFAULT_PORTS = (80, 443)
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def normalize_host(host: str) -> str:
    """Lower-case a host name and drop one trailing dot; an address gets its canonical form.

    Raises ValueError for what is neither a DNS name nor an address.
    """
    text = host.strip().lower()
    address = _address(text)
    if address is not None:
        return str(address)
    text = text[:-1] if text.endswith(".") else text
    if not text or len(text) > 253 or not all(_LABEL.match(p) for p in text.split(".")):
        raise ValueError(f"{host!r} is not a host name or an IP address")
    return text


def _pattern(pattern: str, where: str) -> str:
    text = pattern.strip().lower()
    if text == "*":
        return text
    if text.startswith("*."):
        try:
            return "*." + normalize_host(text[2:])
        except ValueError:
            pass
    else:
        try:
            return normalize_host(text)
        except ValueError:
            pass
    raise ValueError(f"{where}: {pattern!r} is not a host name, '*.domain', '*' or an IP "
                     "address")


def _matches(host: str, pattern: str) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


#: Not public, whatever a Python version's ``ipaddress`` says (its lists change between
#: releases, and the proxy runs the image's Python): RFC 6890's special-purpose blocks and later
#: ones. IPv4 inside IPv6 (mapped, compatible, NAT64, 6to4, Teredo) is judged by `_inner_ipv4`.
_NOT_PUBLIC = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
    "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b:1::/48", "100::/64", "2001::/23",
    "2001:db8::/32", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10",
    "ff00::/8",
))
#: IPv6 prefixes whose last 32 bits are an IPv4 address the traffic goes on to: IPv4-mapped,
#: IPv4-compatible (deprecated), IPv4-translated (SIIT) and the well-known NAT64 prefix.
_LOW_32 = tuple(ipaddress.ip_network(n) for n in (
    "::ffff:0:0/96", "::/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
_6TO4 = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")


def _inner_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address] | None:
    """The IPv4 addresses an IPv6 address carries and leads to, or None if it carries none."""
    if any(address in net for net in _LOW_32):
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    if address in _6TO4:
        return [ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF)]
    if address in _TEREDO:  # the server, and the client (stored inverted)
        return [ipaddress.IPv4Address((int(address) >> 64) & 0xFFFFFFFF),
                ipaddress.IPv4Address(~int(address) & 0xFFFFFFFF)]
    return None


def _flags_public(address: IPAddress) -> bool:
    flags = ("is_private", "is_reserved", "is_loopback", "is_link_local", "is_multicast",
             "is_unspecified", "is_site_local")
    return address.is_global and not any(getattr(address, f, False) for f in flags) and \
        not any(address in net for net in _NOT_PUBLIC if net.version == address.version)


def is_public(address: IPAddress) -> bool:
    """Whether `address` is a public unicast address: nothing ``ipaddress`` calls private,
    reserved, loopback, link-local, multicast, unspecified or site-local, nor in `_NOT_PUBLIC`.

    An IPv6 address that carries IPv4 (mapped ``::ffff:a.b.c.d``, compatible ``::a.b.c.d``,
    translated, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo) is judged by that IPv4:
    a translator or relay on the path takes it there. The local-use NAT64 prefix
    ``64:ff9b:1::/48`` can embed IPv4 at any length, so it is never public; Teredo's
    ``2001::/32`` is inside ``2001::/23``, never public either.
    """
    if isinstance(address, ipaddress.IPv6Address):
        address = ipaddress.IPv6Address(int(address))  # without a scope id
        inner = _inner_ipv4(address)
        if inner is not None and not all(_flags_public(a) for a in inner):
            return False
        if inner is not None and address not in _TEREDO:
            return True
    return _flags_public(address)


@dataclass(frozen=True)
class Decision:
    """The proxy's answer for one destination: allowed, or refused by `rule` because `reason`."""

    allowed: bool
    rule: str = ""
    reason: str = ""


@dataclass(frozen=True)
class EgressPolicy:
    """Normalized host patterns and ports; build it with `from_fields`."""

    allowed_hosts: tuple[str, ...] = ()
    blocked_hosts: tuple[str, ...] = ()
    allowed_ports: tuple[int, ...] = DEFAULT_PORTS
    _listed: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def from_fields(cls, *, allowed_hosts: Iterable[str] = (),
                    blocked_hosts: Iterable[str] = (), allowed_ports: Iterable[int] = (),
                    where: str = "allowed_hosts") -> EgressPolicy:
        """Validate and normalize; an empty ``allowed_ports`` means `DEFAULT_PORTS`.

        Raises ValueError naming the bad pattern or port.
        """
        allowed = tuple(dict.fromkeys(_pattern(p, where) for p in allowed_hosts))
        blocked = tuple(dict.fromkeys(
            _pattern(p, where.replace("allowed_hosts", "blocked_hosts")) for p in blocked_hosts))
        ports = tuple(sorted(set(allowed_ports))) or DEFAULT_PORTS
        for port in ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"allowed_ports: {port} is not a port (1-65535)")
        listed = frozenset(p for p in allowed if _address(p) is not None)
        return cls(allowed_hosts=allowed, blocked_hosts=blocked, allowed_ports=ports,
                   _listed=listed)

    def to_json(self) -> dict[str, Any]:
        """The policy as JSON for the proxy process."""
        return {"allowed_hosts": list(self.allowed_hosts),
                "blocked_hosts": list(self.blocked_hosts),
                "allowed_ports": list(self.allowed_ports)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EgressPolicy:
        """Read what `to_json` wrote."""
        return cls.from_fields(allowed_hosts=data.get("allowed_hosts") or (),
                               blocked_hosts=data.get("blocked_hosts") or (),
                               allowed_ports=data.get("allowed_ports") or ())

    def check_name(self, host: str, port: int) -> Decision:
        """Rules 1-3: may the sandbox ask for ``host:port`` at all (before resolving it)?"""
        try:
            name = normalize_host(host)
        except ValueError:
            return Decision(False, "host", f"{host[:100]!r} is not a host name or IP address")
        if port not in self.allowed_ports:
            ports = ", ".join(map(str, self.allowed_ports))
            return Decision(False, "allowed_ports",
                            f"port {port} is not in allowed_ports ({ports})")
        for pattern in self.blocked_hosts:
            if _matches(name, pattern):
                return Decision(False, "blocked_hosts", f"{name} matches blocked_hosts "
                                f"entry {pattern!r}")
        if not any(_matches(name, pattern) for pattern in self.allowed_hosts):
            return Decision(False, "allowed_hosts", f"{name} matches no allowed_hosts entry")
        return Decision(True)

    def check_addresses(self, host: str, addresses: Sequence[str]) -> Decision:
        """Rule 4: may the proxy connect to what ``host`` resolved to? All must pass: a name
        that also resolves to a private address is refused, whichever address came first."""
        if not addresses:
            return Decision(False, "dns", f"{host} did not resolve")
        for text in addresses:
            address = _address(text)
            if address is None:
                return Decision(False, "dns", f"{host} resolved to {text[:60]!r}")
            if str(address) in self.blocked_hosts:
                return Decision(False, "blocked_hosts", f"{host} resolves to {address}, which "
                                "blocked_hosts lists")
            if not is_public(address) and str(address) not in self._listed:
                return Decision(False, "private_address",
                                f"{host} resolves to {address}, a non-public address, which "
                                "allowed_hosts does not list")
        return Decision(True)


def merged_policy(security: Any, network: Any) -> EgressPolicy | None:
    """The one policy both config places lead to (`SecurityPolicy` and `NetworkConfig`
    fields, united), or None when neither names a host, a blocked host or a port.

    Raises ValueError naming the field: a bad pattern, or blocked hosts or ports without any
    allowed host (nothing would be allowed, which is what no network at all does better).
    """
    fields = ("allowed_hosts", "blocked_hosts", "allowed_ports")
    values = {f: (*getattr(security, f), *getattr(network, f)) for f in fields}
    if not any(values.values()):
        return None
    if not values["allowed_hosts"]:
        named = [f"{place}.{f}" for f in fields for place, obj in
                 (("security", security), ("network", network)) if getattr(obj, f)]
        raise ValueError(
            f"{', '.join(named)}: given without allowed_hosts: the egress proxy allows only "
            "hosts that allowed_hosts lists; add the hosts (or '*' for every public host)")
    return EgressPolicy.from_fields(
        allowed_hosts=values["allowed_hosts"], blocked_hosts=values["blocked_hosts"],
        allowed_ports=values["allowed_ports"], where="allowed_hosts")
