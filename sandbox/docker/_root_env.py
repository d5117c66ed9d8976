"""Keep the image's loader and shell variables away from the root processes the SDK runs.

The container's main process (docker-init, then the keepalive shell) is root, and so are some
of the SDK's own execs (the /etc/hosts write, the working dir's set-up, the session shell's
unreadable copy, a repository copied with an owner). All of them start with the container's
environment, the image's ``ENV`` included, before any line of their script runs: an image
whose ``LD_LIBRARY_PATH`` or ``LD_PRELOAD`` names a place the sandbox user can write (a conda
prefix, its home) made the keepalive's hourly ``sleep`` map a library the user planted, as
root. So the create body sets those variables empty (an empty ``LD_PRELOAD`` /
``LD_LIBRARY_PATH`` names nothing: glibc measured, musl by its loader's ``path_open``), every
exec of the sandbox user gets the image's values back through its own ``Env`` (commands see
the image's environment as before), and the SDK's root execs get a ``PATH`` of the system's
directories only. A checkpoint commits the image's values back, so a sandbox made from it
hides them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final

import attrs

from .._backend import ProcessSpec
from .._constants import ROOT_PATH
from .._ids import names_root, split_spec
from .._session_wire import loader_restored

__all__ = ["RootEnv", "hidden_from_root", "is_root_user"]

#: Besides every ``LD_*``: what glibc drops for set-uid programs (``unsecvars.h``: files it
#: loads or writes, modules it opens) and what makes a shell read a file (``ENV``,
#: ``BASH_ENV``) or change how it runs a script (``CDPATH``, ``SHELLOPTS``, ``BASHOPTS``,
#: ``PS4``).
_NAMED: Final = frozenset({
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR",
    "TZDIR", "ENV", "BASH_ENV", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4",
})


def hidden_from_root(name: str) -> bool:
    """Whether the image's variable ``name`` is kept from root processes."""
    # BASH_FUNC_*: a function a root script's bash-as-sh would import over a command it calls.
    return name.startswith(("LD_", "BASH_FUNC_")) or name in _NAMED


def is_root_user(user: str) -> bool:
    """Whether an exec as ``user`` runs as root in a container the backend made."""
    # "" is the container's own User: root (the backend creates every container so).
    return not user or names_root(split_spec(user)[0])


@attrs.frozen
class RootEnv:
    """The image's variables hidden from root (``image``: their values, for the sandbox
    user's execs) and the user commands run as (``sandbox_user``: root there means every
    exec is the user's own, and gets the image's values too)."""

    image: Mapping[str, str] = attrs.field(factory=dict)
    sandbox_user: str = ""

    @classmethod
    def hide(cls, body: MutableMapping[str, Any], image_env: Iterable[str], *,
             sandbox_user: str) -> RootEnv:
        """Set the image's risky variables (``image_env``: its ``Config.Env``) empty in the
        create ``body``'s ``Env``, where the body does not set them itself."""
        own = {entry.partition("=")[0] for entry in body.get("Env") or []}
        image: dict[str, str] = {}
        for entry in image_env:
            name, _, value = entry.partition("=")
            if value and hidden_from_root(name) and name not in own:
                image[name] = value
        if image:
            body["Env"] = [*(body.get("Env") or []), *(f"{name}=" for name in image)]
        return cls(image, sandbox_user)

    def committed(self) -> list[str]:
        """The ``Env`` a checkpoint's commit merges over the container's: the image's values
        back in place of the empty ones."""
        return [f"{name}={value}" for name, value in self.image.items()]

    def spec(self, spec: ProcessSpec) -> ProcessSpec:
        """``spec`` with the environment its exec needs: a root exec of the SDK (root while
        the sandbox user is not) gets `ROOT_PATH` and the hidden variables empty; any other
        gets the image's values beneath its own (a session's shell: its loader's through
        `loader_restored`). User "" is the sandbox user (as on the
        other backends), not the container's own (root)."""
        if not spec.user and self.sandbox_user:
            spec = attrs.evolve(spec, user=self.sandbox_user)
        # The sandbox user's own exec (every command's): no user to parse on this hot path.
        if spec.user != self.sandbox_user and is_root_user(spec.user) and \
                not is_root_user(self.sandbox_user):
            return attrs.evolve(spec, env={**spec.env, **dict.fromkeys(self.image, ""),
                                           "PATH": ROOT_PATH})
        if spec.sealed:  # a session's shell: no LD_* at its start, back for its commands
            return attrs.evolve(spec, env=loader_restored({**self.image, **spec.env}))
        if not self.image:
            return spec
        return attrs.evolve(spec, env={**self.image, **spec.env})
