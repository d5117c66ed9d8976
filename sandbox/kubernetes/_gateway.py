"""The one module that imports kubernetes_asyncio: configuration, REST calls and exec sockets.

kubernetes_asyncio provides what is hard to get right (kubeconfig contexts, exec-plugin and
in-cluster tokens with their refresh, client certificates, the TLS session); the SDK speaks
the REST paths itself so every answer stays the API server's plain JSON, and its errors become
the SDK's: 404 `KubeNotFound`, 409 `KubeConflict`, 422 `KubeInvalid`, a refused connection
`EngineUnavailable`. Exec is a websocket to ``pods/<name>/exec`` offering the channel
subprotocols the SDK implements (``v5.channel.k8s.io`` first, then ``v4``). A kubeconfig's
exec credential plugin is parsed by kubernetes_asyncio but run by `_credential` (stdin from
/dev/null, killed when the wait for it ends early), through `_Loader`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import attrs

try:
    import yaml  # type: ignore[import-untyped]  # kubernetes_asyncio's own YAML parser
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.config import kube_config as k8s_kube_config
    from kubernetes_asyncio.config.exec_provider import ExecProvider
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("the Kubernetes backend needs kubernetes_asyncio: "
                      "pip install 'sandbox[kubernetes]'") from exc

from .._errors import EngineTimeout, EngineUnavailable, SandboxError
from ._credential import CredentialPluginFailed, run_credential_plugin

__all__ = [
    "CHANNEL_PROTOCOLS",
    "Cluster",
    "ExecSocket",
    "ExecStreamLost",
    "KubeApiError",
    "KubeConflict",
    "KubeInvalid",
    "KubeNotFound",
    "delete_options",
]

#: The exec subprotocols the SDK speaks, preferred first (see ``_exec``).
CHANNEL_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
#: Seconds one REST call may take.
REST_TIMEOUT = 60.0


class KubeApiError(SandboxError):
    """The API server answered a call with an error status."""

    code = "KUBERNETES_API_ERROR"

    def __init__(self, message: str, *, status: int, reason: str = "", details: str = "",
                 cause: BaseException | None = None) -> None:
        super().__init__(message, details=details, cause=cause,
                         retryable=status in (429, 500, 503, 504))
        self.status = status
        self.reason = reason


class KubeNotFound(KubeApiError):
    """404: the object (or the namespace) does not exist."""


class KubeConflict(KubeApiError):
    """409: an object of that name exists already."""


class KubeInvalid(KubeApiError):
    """422: the API server refused the object as invalid."""


def _error(what: str, status: int, body: bytes | str | None,
           cause: BaseException | None = None) -> KubeApiError:
    """The SDK error for an API server error answer (a ``Status`` object when it is JSON)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    reason, message = "", text[:2000]
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        reason = str(doc.get("reason") or "")
        message = str(doc.get("message") or message)[:2000]
    cls = {404: KubeNotFound, 409: KubeConflict, 422: KubeInvalid}.get(status, KubeApiError)
    return cls(f"the Kubernetes API server refused to {what} (HTTP {status} {reason})".rstrip(),
               status=status, reason=reason, details=message, cause=cause)


def delete_options(uid: str, grace_seconds: int = 0) -> dict[str, Any]:
    """DeleteOptions for one object the SDK made: ``grace_seconds`` (0: the API server removes
    the object at once and the kubelet stops the containers with its own minimum grace),
    dependents in the background, and the uid as precondition (409 if the name now belongs
    to another object) when known."""
    body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1",
                            "gracePeriodSeconds": grace_seconds,
                            "propagationPolicy": "Background"}
    if uid:
        body["preconditions"] = {"uid": uid}
    return body


class ExecStreamLost(EngineUnavailable):
    """The exec websocket broke (not a normal close)."""


@attrs.frozen
class ExecSocket:
    """One exec websocket and the subprotocol the API server chose for it.

    `messages` yields each binary message whole (channel byte first) until the server closes;
    text messages (the base64 subprotocols, never offered) are skipped.
    """

    ws: aiohttp.ClientWebSocketResponse
    protocol: str

    async def messages(self) -> AsyncIterator[bytes]:
        try:
            async for msg in self.ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    yield bytes(msg.data)
                elif msg.type == aiohttp.WSMsgType.ERROR:
                    raise ExecStreamLost("the exec stream broke", details=str(msg.data))
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise ExecStreamLost("the exec stream broke", details=str(exc), cause=exc) from exc

    async def send(self, data: bytes) -> None:
        """Send one binary message; raises `ExecStreamLost` if the stream is gone."""
        try:
            await self.ws.send_bytes(data)
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            raise ExecStreamLost("the exec stream is closed", details=str(exc),
                                 cause=exc) from exc

    async def close(self) -> None:
        with contextlib.suppress(aiohttp.ClientError, ConnectionError, RuntimeError):
            await self.ws.close()


class _Merger(k8s_kube_config.KubeConfigMerger):
    """kubernetes_asyncio's kubeconfig reader, with a file that holds no kubeconfig refused
    by name: an empty file (YAML ``null``) or another YAML value made it raise a bare
    TypeError, invalid YAML a parser error that is no `ConfigException`, and no file at
    all a `config` of None (kubernetes_asyncio's own loader: "No configuration found")."""

    def __init__(self, paths: str) -> None:
        super().__init__(paths)  # it expands a ~; a missing file is left out
        if self.config is None:
            raise k8s_config.ConfigException(
                f"no such file: {os.path.expanduser(paths)}; name an existing kubeconfig "
                "(the backend's kubeconfig argument or KUBECONFIG), or use in_cluster=True "
                "inside a pod")

    def load_config(self, path: str) -> None:
        try:
            with open(path, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise k8s_config.ConfigException(f"{path} is not valid YAML: {exc}") from exc
        if not isinstance(doc, dict):
            what = "is empty" if doc is None else \
                f"holds a YAML {type(doc).__name__}, not a mapping"
            raise k8s_config.ConfigException(
                f"{path} {what}, so it is no kubeconfig; write one there, or name another "
                "(the backend's kubeconfig argument or KUBECONFIG)")
        super().load_config(path)  # reads it again: a kubeconfig is small and read once


class _Loader(k8s_kube_config.KubeConfigLoader):
    """kubernetes_asyncio's kubeconfig loader, the exec credential plugin run by
    `run_credential_plugin` (stdin /dev/null, killed with its group when the wait for it
    ends early) instead of ``ExecProvider.run`` (the terminal's stdin, left running)."""

    async def load_from_exec_plugin(self) -> bool:
        # `KubeConfigLoader.load_from_exec_plugin`'s handling of the answer (36.1.0), with
        # the plugin parsed by its `ExecProvider` and run by `run_credential_plugin`.
        assert self._user is not None and self._cluster is not None  # as it asserts
        provider = ExecProvider(self._user["exec"])
        status = await run_credential_plugin(provider.args, provider.env,
                                             str(provider.api_version))
        if "token" in status:
            self.token = f"Bearer {status['token']}"
            return True
        if "clientCertificateData" in status and "clientKeyData" in status:
            base_path = self._get_base_path(self._cluster.path)
            for attr, key in (("cert_file", "clientCertificateData"),
                              ("key_file", "clientKeyData")):
                setattr(self, attr, k8s_kube_config.FileOrData(
                    status, None, data_key_name=key, file_base_path=base_path,
                    base64_file_content=False, temp_file_path=self._temp_file_path,
                ).as_file())
            return True
        raise CredentialPluginFailed("exec: the plugin answered neither a token nor a client "
                                     "certificate and key")


class Cluster:
    """A connection to one API server, from a kubeconfig or the pod's service account."""

    def __init__(self, api: k8s_client.ApiClient, host: str) -> None:
        self._api = api
        self.host = host.rstrip("/")

    @classmethod
    async def connect(cls, *, kubeconfig: str | None, context: str | None,
                      in_cluster: bool) -> Cluster:
        """Load the configuration and open a client; the caller closes it with `close`."""
        conf = k8s_client.Configuration()
        if kubeconfig is None and not in_cluster and os.environ.get("KUBECONFIG"):
            # Read now, not when kubernetes_asyncio was imported; the first file of a list.
            kubeconfig = os.environ["KUBECONFIG"].split(os.pathsep)[0]
        try:
            if in_cluster:
                k8s_config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
            else:
                # `load_kube_config(persist_config=False)`, with the SDK's plugin runner.
                merged = _Merger(kubeconfig or "~/.kube/config")
                await _Loader(config_dict=merged.config, config_base_path=None,
                              active_context=context).load_and_set(conf)
        except (k8s_config.ConfigException, CredentialPluginFailed, OSError, ValueError,
                KeyError, TypeError) as exc:
            where = "the pod's service account" if in_cluster else \
                f"kubeconfig {kubeconfig or '~/.kube/config'!r}"
            raise EngineUnavailable(f"cannot load the Kubernetes configuration from {where}",
                                    details=str(exc), cause=exc, retryable=False) from exc
        return cls(k8s_client.ApiClient(conf), str(conf.host or ""))

    async def close(self) -> None:
        await self._api.close()

    async def _auth(self, queries: list[tuple[str, str]]) -> dict[str, str]:
        headers: dict[str, str] = {"Accept": "application/json",
                                   "Content-Type": "application/json"}
        await self._api.update_params_for_auth(headers, queries, ["BearerToken"])
        return headers

    async def call(self, what: str, method: str, path: str, *,
                   query: Sequence[tuple[str, str]] = (), body: Mapping[str, Any] | None = None,
                   deadline: float = REST_TIMEOUT) -> dict[str, Any]:
        """One REST call; returns the JSON object the API server answered with."""
        queries = list(query)
        headers = await self._auth(queries)
        url = self.host + path + (f"?{urlencode(queries)}" if queries else "")
        try:
            resp = await self._api.rest_client.request(
                method, url, headers=headers, body=dict(body) if body is not None else None,
                _request_timeout=deadline)
        except ApiException as exc:
            raise _error(what, int(exc.status or 0), exc.body, exc) from exc
        except TimeoutError as exc:
            raise EngineTimeout(f"the Kubernetes API server did not answer in {deadline:g} s "
                                f"when asked to {what}", details=self.host, cause=exc) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise EngineUnavailable(f"cannot reach the Kubernetes API server to {what}",
                                    details=f"{self.host}: {exc}", cause=exc) from exc
        try:
            doc = json.loads(resp.data or b"{}")
        except ValueError as exc:
            raise KubeApiError(f"the Kubernetes API server answered {what} with non-JSON",
                               status=resp.status, details=repr(resp.data[:200])) from exc
        if not isinstance(doc, dict):
            raise KubeApiError(f"the Kubernetes API server answered {what} with non-object "
                               "JSON", status=resp.status)
        return doc

    async def watch(self, what: str, path: str, *,
                    query: Sequence[tuple[str, str]] = ()) -> AsyncGenerator[dict[str, Any]]:
        """Watch a collection: yield each event (``{"type": ..., "object": ...}``) until the
        server ends the stream. Close the generator (``contextlib.aclosing``) when done."""
        queries = [*query, ("watch", "true")]
        headers = await self._auth(queries)
        url = f"{self.host}{path}?{urlencode(queries)}"
        session = self._api.rest_client.pool_manager
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=REST_TIMEOUT)
        try:
            async with session.get(url, headers=headers, timeout=timeout) as resp:
                if resp.status >= 400:
                    raise _error(what, resp.status, await resp.read())
                async for line in resp.content:
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError as exc:
                        raise KubeApiError(f"the Kubernetes API server sent a watch event that "
                                           f"is not JSON when asked to {what}", status=200,
                                           details=repr(line[:200])) from exc
                    if isinstance(event, dict):
                        yield event
        except (aiohttp.ClientError, OSError) as exc:
            raise EngineUnavailable(f"lost the Kubernetes API server's watch to {what}",
                                    details=f"{self.host}: {exc}", cause=exc) from exc

    async def exec(self, namespace: str, pod: str, container: str, argv: Sequence[str], *,
                   stdin: bool) -> ExecSocket:
        """Open an exec websocket running ``argv`` (stdout and stderr apart, no TTY)."""
        queries: list[tuple[str, str]] = [("command", a) for a in argv]
        queries += [("container", container), ("stdin", "true" if stdin else "false"),
                    ("stdout", "true"), ("stderr", "true"), ("tty", "false")]
        headers = await self._auth(queries)
        # No Accept or Content-Type on the upgrade: the 1.20 kubelet's exec route answers
        # "Accept: application/json" with 406 Not Acceptable (the stream is not JSON).
        headers.pop("Content-Type", None)
        headers.pop("Accept", None)
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/exec"
        url = f"{self.host}{path}?{urlencode(queries)}"
        session = self._api.rest_client.pool_manager
        try:
            ws = await session.ws_connect(url, headers=headers, protocols=CHANNEL_PROTOCOLS,
                                          max_msg_size=0, autoping=True,
                                          timeout=aiohttp.ClientWSTimeout(ws_close=10.0))
        except aiohttp.WSServerHandshakeError as exc:
            raise _error("start a command (exec)", exc.status, exc.message, exc) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise EngineUnavailable("cannot reach the Kubernetes API server to start a "
                                    "command (exec)", details=f"{self.host}: {exc}",
                                    cause=exc) from exc
        if ws.protocol not in CHANNEL_PROTOCOLS:
            await ws.close()
            raise KubeApiError(
                "the Kubernetes API server chose no exec subprotocol the SDK speaks",
                status=101, details=f"offered {', '.join(CHANNEL_PROTOCOLS)}, got "
                                    f"{ws.protocol!r}")
        return ExecSocket(ws, ws.protocol)
