"""Optional dependencies: importing an integration or backend without its extra says which.

Without this, ``import sandbox.integrations.inspect`` on a plain install fails deep inside with
``ModuleNotFoundError: No module named 'inspect_ai'``; the modules that need an extra wrap
their framework imports and raise `missing_extra`'s error instead.
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(extra: str, what: str, exc: ImportError) -> ImportError:
    """The error for ``what`` imported without ``sandbox[extra]`` (``exc`` is the cause)."""
    module = exc.name or "a dependency"
    return ImportError(f"{what} needs the {extra!r} extra ({module} is not installed): "
                       f"pip install 'sandbox[{extra}]'", name=exc.name)
