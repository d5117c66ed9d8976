"""What a sandbox's egress proxy decided so far: the counters `Sandbox.egress_stats` returns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

__all__ = ["EgressStats"]


def _counts(value: Mapping[str, int] | Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(rule), int(count)) for rule, count in items))


@attrs.frozen(kw_only=True)
class EgressStats:
    """Requests the egress proxy answered for one sandbox.

    Attributes:
        enforced: Whether the sandbox has an egress policy (a proxy) at all.
        allowed: Requests let through (a tunnel or a forwarded request each).
        refused: Requests refused by the policy.
        failed: Allowed requests whose destination could not be reached.
        refused_by_rule: ``(rule, count)`` pairs, sorted: the rules are ``allowed_hosts``,
            ``blocked_hosts``, ``allowed_ports``, ``private_address``, ``dns``, ``host``,
            ``host_header`` (a ``Host`` naming another site than the one checked) and ``sni``
            (a TLS ClientHello naming another server than the tunnel's, or none).
    """

    enforced: bool = False
    allowed: int = 0
    refused: int = 0
    failed: int = 0
    refused_by_rule: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_counts)

    def refused_for(self, rule: str) -> int:
        """How many requests `rule` refused."""
        return dict(self.refused_by_rule).get(rule, 0)
