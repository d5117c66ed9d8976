"""A command's resource usage, worked out on first read.

A command's usage is exact counters read at its start and end (`_cgroup_usage`), sharpened
with the sampler's window; reading them must happen then, but turning them into a
`ResourceUsage` (fifteen fields, the CPU rate, the peak, the percent) need not: most results
are never asked for their usage, and building it was a fifth of the SDK's own CPU per exec.
`LazyUsage` keeps what was read and builds the value once, on first use, from those inputs
alone (the clock was read when the command ended), so it is the value an eager build gives.
It compares, hashes, prints and pickles as that `ResourceUsage`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LazyUsage"]

#: Held while a first read builds a value (only then): two threads reading it at once get
#: the same object, and the inputs are dropped exactly once.
_BUILD_LOCK = threading.Lock()


class LazyUsage:
    """``build(*args)``, called on first `get` and kept; ``build`` must depend on ``args``
    alone (no clock, no state that moves), so when it runs does not change what it gives.
    Typed loosely (the value is a `ResourceUsage`; `_models.usage_of` reads it as one): this
    module imports none of the models, which name it."""

    __slots__ = ("_args", "_build", "_value")

    def __init__(self, build: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._build: Callable[..., Any] | None = build
        self._args: tuple[Any, ...] | None = args
        self._value: Any = None

    @property
    def built(self) -> bool:
        return self._value is not None

    def get(self) -> Any:
        value = self._value
        if value is None:
            with _BUILD_LOCK:
                value = self._value
                if value is None:
                    assert self._build is not None and self._args is not None
                    value = self._value = self._build(*self._args)
                    self._build = self._args = None  # the counters and window go
        return value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyUsage):
            other = other.get()
        return bool(self.get() == other)

    def __hash__(self) -> int:
        return hash(self.get())

    def __repr__(self) -> str:
        return repr(self.get())

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (and copied) as the value: the inputs are never part of a result's state.
        return (_itself, (self.get(),))


def _itself(value: Any) -> Any:
    return value
