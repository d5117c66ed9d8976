"""Run a kubeconfig's exec credential plugin the way a library (not a terminal) should.

kubernetes_asyncio's own runner (``ExecProvider.run``) gives the plugin the terminal's stdin
(hard-coded ``stdin=None``) and, when its caller gives up (``sandbox ps`` and ``gc`` wait
`PLACE_DEADLINE` per place), leaves it running: a plugin waiting for a login prompt kept
reading the user's terminal after the command had returned. Here the plugin reads
``/dev/null`` (``spec.interactive`` says so, as client-go does without a terminal), runs in
a session of its own (no controlling terminal, one process group), and however the wait ends
without its answer (a timeout, a cancellation, a failure; also one that comes while asyncio
is still starting it) the whole group is killed and reaped before the error goes on.
`sandbox.kubernetes._gateway` hands the result to kubernetes_asyncio as the plugin's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from .._shield import finish_despite_cancel

__all__ = ["CredentialPluginFailed", "run_credential_plugin"]

#: Seconds to wait for a killed plugin's pipes to close and its exit to be reaped.
REAP_TIMEOUT = 5.0


class CredentialPluginFailed(Exception):
    """The plugin failed, or answered something that is not an ExecCredential."""


async def run_credential_plugin(argv: Sequence[str], env: Mapping[str, str],
                                api_version: str) -> dict[str, Any]:
    """Run the plugin ``argv`` with ``env`` and return its ExecCredential's ``status``.

    Raises:
        CredentialPluginFailed: It exited non-zero or answered a malformed credential.
        OSError: It could not be started.
    """
    info = {"apiVersion": api_version, "kind": "ExecCredential",
            "spec": {"interactive": False}}
    started: list[asyncio.subprocess.Process] = []

    async def start() -> None:
        started.append(await asyncio.create_subprocess_exec(
            *argv, env={**env, "KUBERNETES_EXEC_INFO": json.dumps(info)},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True))

    answered = False
    try:
        # The start runs to its end even if the wait is given up meanwhile: the process
        # exists before its handle reaches us (asyncio then connects its pipes), and a
        # cancellation there lost the handle; asyncio killed the plugin but not what it had
        # started. With the handle, the `finally` kills the whole group.
        await finish_despite_cancel(start())
        stdout, stderr = await started[0].communicate()
        answered = True
    finally:
        if not answered and started:
            await _kill(started[0])
    proc = started[0]
    if proc.returncode != 0:
        why = stderr.decode("utf-8", "replace").strip()[-500:]
        raise CredentialPluginFailed(f"exec: process returned {proc.returncode}"
                                     + (f". {why}" if why else ""))
    return _status(stdout, api_version)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill the plugin's process group and reap it; its pipes are read to their end, so its
    transport closes. Runs to its end even if the caller is cancelled again meanwhile."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: pgid == pid

    async def reap() -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REAP_TIMEOUT):
                await proc.communicate()  # the rest of its output, its exit status

    await finish_despite_cancel(reap())


def _status(stdout: bytes, api_version: str) -> dict[str, Any]:
    """The ``status`` of the plugin's ExecCredential, checked as kubernetes_asyncio does."""
    try:
        data = json.loads(stdout)
    except ValueError as exc:
        raise CredentialPluginFailed(f"exec: failed to decode process output: {exc}") from exc
    if not isinstance(data, dict):
        raise CredentialPluginFailed("exec: the plugin's output is not a JSON object")
    for key in ("apiVersion", "kind", "status"):
        if key not in data:
            raise CredentialPluginFailed(f"exec: malformed response. missing key '{key}'")
    if data["apiVersion"] != api_version:
        raise CredentialPluginFailed(f"exec: plugin api version {data['apiVersion']} does "
                                     f"not match {api_version}")
    status = data["status"]
    if not isinstance(status, dict):
        raise CredentialPluginFailed("exec: the plugin's status is not an object")
    return status
