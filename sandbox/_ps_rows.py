"""One row of ``sandbox ps``, whichever backend the sandbox runs on, and the owner verdict it
shows: shared by the Docker listing (``docker._ps``) and the Kubernetes one
(``kubernetes._ps``), which must not import each other.

The owner column says whether the process that created a sandbox is still alive (``alive``),
has exited (``gone``: ``sandbox gc`` would remove it), or cannot be checked from here
(``unknown``: another host, or no owner labels), by the rules ``gc`` uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import attrs

from ._constants import LABEL_OWNER_HOST, LABEL_OWNER_PID
from ._owner import Here, owner_pid, owner_verdict

__all__ = ["PlaceLister", "SandboxRow", "display_text", "owner_state"]


@attrs.frozen(kw_only=True)
class SandboxRow:
    """One sandbox as ``sandbox ps`` shows it.

    Attributes:
        id: The SDK's sandbox id (its label).
        container_id: The engine's id of it: a Docker container's id, a Pod's uid.
        name: The container's name; a Pod's as ``namespace/name``.
        image: The image it runs.
        state: The engine's state: running, exited, created, paused, ...; a Pod's phase in
            lower case (pending, running, succeeded, failed), or terminating.
        created: When the SDK created it.
        age_seconds: Seconds since then (None when unknown).
        owner_pid: The pid of the process that created it (None when not labelled).
        owner_host: The host that process ran on.
        owner: "alive", "gone" or "unknown" (cannot be checked from here).
        type: The backend: "docker" or "kubernetes".
        place: Where it is off this engine ({} for Docker): for a Pod the kubeconfig,
            context and namespace its owner recorded (`sandbox._places`).
    """

    id: str
    container_id: str
    name: str
    image: str
    state: str
    created: datetime | None
    age_seconds: float | None
    owner_pid: int | None
    owner_host: str
    owner: str
    type: str = "docker"
    place: Mapping[str, Any] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (``created`` in ISO 8601)."""
        data = attrs.asdict(self)
        data["created"] = self.created.isoformat() if self.created else None
        data["place"] = dict(self.place)
        return data


class PlaceLister(Protocol):
    """A backend's ``ps`` of the sandboxes in the places its sandboxes recorded (see
    `sandbox._registry.PLACE_LISTERS`): with ``owner``, only those the process with that
    pid on this host created. A place that cannot be reached is skipped with a warning."""

    async def __call__(self, *, owner: int | None, here: Here,
                       now: datetime) -> list[SandboxRow]: ...


def owner_state(labels: Mapping[str, str], here: Here) -> str:
    """"alive", "gone" or "unknown" for the owner named by ``labels`` (or annotations)."""
    host, pid = labels.get(LABEL_OWNER_HOST, ""), labels.get(LABEL_OWNER_PID, "")
    if not host or owner_pid(pid) is None or host != here.host:
        return "unknown"
    gone, _reason = owner_verdict(labels, here=here)
    return "gone" if gone else "alive"


def display_text(value: Any, limit: int = 256) -> str:
    """An engine string for display: untrusted (a container's name, an image's)."""
    text = value if isinstance(value, str) else ""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])
