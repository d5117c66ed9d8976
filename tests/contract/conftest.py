"""The behaviour suite's fixture: one `Harness` per backend, shared by that backend's checks
(module scope: one shared sandbox per backend), and the checks each backend fails today."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sandbox.testing import Harness
from tests.contract._backends import NAMES, real_cluster, subject
from tests.kubernetes._cluster import Target
from tests.kubernetes._fake_apiserver import FakeApiServer

#: (backend, check) -> why it fails today: the findings, each an xfail(strict=True), so a fix
#: turns it into an unexpected pass that asks for this line to go.
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    ("kubernetes", "session_timeout_kills_subshells"): (
        "a busybox session shell runs from an unreadable copy, so every applet it starts is "
        "non-dumpable: no command's marker can be read, and the kill sweep takes everything "
        "below the shell, an earlier command's background job included"),
    ("docker+gvisor", "session_timeout_kills_builtin_subshells"): (
        "the host does not see gVisor's processes, and the sweep from inside the sandbox does "
        "not know when the command was sent: a subshell of builtins alone (no marked process "
        "below it) outlives its command's timeout"),
    ("kubernetes", "session_timeout_kills_builtin_subshells"): (
        "the session's shell runs from an unreadable copy, so its forks are non-dumpable: the "
        "sweep from inside takes everything below the shell, an earlier command's subshell of "
        "builtins alone included"),
    ("kubernetes-fake-api", "session_timeout_kills_builtin_subshells"): (
        "the session's shell runs from an unreadable copy, so its forks are non-dumpable: the "
        "sweep from inside takes everything below the shell, an earlier command's subshell of "
        "builtins alone included"),
}


#: backend -> (text in the error or its causes, why): a breakage of the whole backend that
#: another branch fixes; such a check is xfailed (not strict: it passes once merged).
BROKEN_UNTIL_MERGED: dict[str, tuple[str, str]] = {}


def broken_until_merged(backend: str, exc: BaseException) -> str:
    """Why ``exc`` is BROKEN_UNTIL_MERGED's known breakage of ``backend``, else ""."""
    text, why = BROKEN_UNTIL_MERGED.get(backend, ("", ""))
    seen: BaseException | None = exc
    while text and seen is not None:
        if text in str(seen):
            return why
        seen = seen.__cause__ or seen.__context__
    return ""


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=NAMES)
async def harness(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    name: str = request.param
    tmp = tmp_path_factory.mktemp(name.replace("+", "-"))
    if name == "kubernetes":
        kube = real_cluster(request.config)
        if kube is None:
            pytest.skip("no real Kubernetes cluster: scripts/kube.sh start writes "
                        "/var/cache/sandbox-sdk/kube/run/READY (or pass --kubeconfig)")
        async with Harness(subject(name, kube=kube), tmp) as h:
            yield h
    elif name == "kubernetes-fake-api":
        server = FakeApiServer(tmp / "fake-cluster")
        await server.start()
        try:
            kube = Target(str(server.kubeconfig(tmp / "kubeconfig")), "sandboxes",
                          "sandbox-busybox:latest", server)
            async with Harness(subject(name, kube=kube), tmp) as h:
                yield h
        finally:
            await server.stop()
    else:
        async with Harness(subject(name), tmp) as h:
            yield h


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(item, "callspec", None)
        if params is None or "harness" not in params.params or "check" not in params.params:
            continue
        why = KNOWN_FAILURES.get((params.params["harness"], str(params.params["check"])))
        if why:
            item.add_marker(pytest.mark.xfail(strict=True, reason=why))
