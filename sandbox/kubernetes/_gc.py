"""Collect sandbox Pods and NetworkPolicies whose owner process is gone, found by label.

The owner (host, boot id, pid, pid start) is in the objects' annotations; the verdict is the
Docker gc's (`sandbox._gc.owner_verdict`): only an owner provably gone from this host is
collected. Pods are reported as ``container`` items, NetworkPolicies as ``network`` items.
Each delete has grace period 0 and the listed uid as precondition (see `delete_options`): an
orphan's keep-alive has no owner to finish for, and a default 30 s grace would leave it
Terminating (holding its node resources) after gc said it was removed.

`gc` looks in one namespace it is given. `collect` is what `sandbox.gc` runs: it looks in every
place (kubeconfig, context, namespace) a sandbox of this host recorded before creating its Pod
(`hold_place`, `sandbox._places`), since a dead owner's cluster is known nowhere else, and
drops the record of a place where nothing of ours is left and no sandbox of this host holds it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from .._constants import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE
from .._errors import ConfigError, EngineUnavailable, SandboxError
from .._gc import GcReport
from .._owner import Collected, GcItem, Here, HostCollector, owner_verdict
from .._places import forget, hold, recorded, retire, trusted_file
from .._wire_time import engine_time
from ._gateway import REST_TIMEOUT, Cluster, KubeConflict, KubeNotFound, delete_options

__all__ = ["COLLECTOR", "collect", "connect_place", "gc", "hold_place", "reachable"]

log = logging.getLogger("sandbox.gc")

_KINDS = (("container", "/api/v1/namespaces/{ns}/pods"),
          ("network", "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"))
#: The name places are recorded under (`sandbox._places`), the backend's type.
BACKEND = "kubernetes"
#: Seconds one list or delete of `collect` may take, and the connect to a recorded place
#: (loading its kubeconfig may run a credential plugin, which kubernetes_asyncio waits for
#: without a timeout): a recorded cluster that no longer answers must not hold the whole gc
#: (or ``sandbox ps``) for the REST default (60 s) per call, or forever.
PLACE_DEADLINE = 15.0
#: The service account token an in-cluster owner used; without it that place is unreachable.
_SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


async def _collect_in(cluster: Cluster, namespace: str, *, dry_run: bool,
                      older_than: timedelta | None, here: Here, now: datetime,
                      deadline: float = REST_TIMEOUT) -> Collected:
    """Collect in one namespace of a connected cluster, each call within ``deadline`` s."""
    removed: dict[str, list[GcItem]] = {"container": [], "network": []}
    kept: dict[str, list[GcItem]] = {"container": [], "network": []}
    failed: list[GcItem] = []
    for kind, template in _KINDS:
        path = template.format(ns=namespace)
        found = await cluster.call(f"list the SDK's {kind}s", "GET", path, query=[
            ("labelSelector", f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}")],
            deadline=deadline)
        for obj in found.get("items") or []:
            meta = obj.get("metadata") or {}
            name = str(meta.get("name") or "")
            gone, reason = owner_verdict(
                meta.get("annotations") or {}, here=here,
                created=engine_time(meta.get("creationTimestamp")),
                older_than=older_than, now=now)
            item = GcItem(kind=kind, id=str(meta.get("uid") or name),  # type: ignore[arg-type]
                          name=name, reason=reason)
            if not gone:
                kept[kind].append(item)
                continue
            if not dry_run:
                try:
                    await cluster.call(f"delete {kind} {name}", "DELETE", f"{path}/{name}",
                                       body=delete_options(str(meta.get("uid") or "")),
                                       deadline=deadline)
                except (KubeNotFound, KubeConflict):
                    pass  # gone already, or the name now belongs to another object
                except SandboxError as exc:
                    failed.append(attrs.evolve(item, reason=f"{reason}, but removing it "
                                                            f"failed: {exc}"))
                    continue
            removed[kind].append(item)
    return Collected(removed=(*removed["container"], *removed["network"]),
                     kept=(*kept["container"], *kept["network"]), failed=tuple(failed))


async def gc(*, namespace: str = "default", kubeconfig: str | None = None,
             context: str | None = None, in_cluster: bool = False, dry_run: bool = False,
             older_than: timedelta | None = None) -> GcReport:
    """Delete the SDK's Pods and NetworkPolicies in ``namespace`` whose owner is gone.

    `sandbox.gc` does the same in every namespace a sandbox of this host used; this one looks
    in the namespace given, recorded or not.

    Raises:
        EngineUnavailable: The API server cannot be reached.
        ConfigError: ``older_than`` is negative.
    """
    if older_than is not None and older_than < timedelta(0):
        raise ConfigError(f"older_than must be >= 0, got {older_than}")
    cluster = await Cluster.connect(kubeconfig=kubeconfig, context=context,
                                    in_cluster=in_cluster)
    try:
        found = await _collect_in(cluster, namespace, dry_run=dry_run, older_than=older_than,
                                  here=Here.current(), now=datetime.now(UTC))
    finally:
        await cluster.close()
    return GcReport(dry_run=dry_run, removed=found.removed, kept=found.kept,
                    failed=found.failed)


def place(*, kubeconfig: str | None, context: str | None, in_cluster: bool,
          namespace: str) -> dict[str, Any]:
    """The place a backend with these options creates its objects in, as recorded: the
    kubeconfig resolved to the file `Cluster.connect` reads (KUBECONFIG's first, else
    ~/.kube/config), so gc finds it from any directory and environment."""
    path: str | None = None
    if not in_cluster:
        given = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] \
            or "~/.kube/config"
        path = os.path.abspath(os.path.expanduser(given))
    return {"kubeconfig": path, "context": context, "in_cluster": in_cluster,
            "namespace": namespace}


def hold_place(*, kubeconfig: str | None, context: str | None, in_cluster: bool,
               namespace: str) -> str | None:
    """Record where a sandbox is about to create its Pod, for `collect` to look there once its
    owner is gone, and keep that record until `release` of the token returned (see
    `sandbox._places.hold`). A place that cannot be recorded (a read-only home) costs gc its
    view of that namespace, not the sandbox: logged, never raised (None is returned)."""
    try:
        return hold(BACKEND, place(kubeconfig=kubeconfig, context=context,
                                   in_cluster=in_cluster, namespace=namespace))
    except OSError as exc:
        log.warning("cannot record namespace %r for gc (sandbox.gc will not look there): %s",
                    namespace, exc)
        return None


def reachable(spot: Mapping[str, Any], *, forget_gone: bool = True) -> str:
    """Why ``spot`` cannot be looked at from here ("" when it can): its kubeconfig is gone
    (then the record is dropped, with ``forget_gone``) or is not to be trusted (others can
    write it: loading it could run their credential plugin as this user)."""
    if spot.get("in_cluster"):
        return "" if _SA_TOKEN.is_file() else "no service account token here"
    path = spot.get("kubeconfig")
    if not isinstance(path, str) or not path:
        return "the record names no kubeconfig"
    if not os.path.exists(path):
        # That cluster's configuration is gone: nothing can reach it by this record.
        if forget_gone and forget(BACKEND, spot):
            return f"its kubeconfig {path} is gone (the record is dropped)"
        return f"its kubeconfig {path} is gone"
    if why := trusted_file(Path(path)):
        return f"its kubeconfig {path} is not to be trusted: {why}"
    return ""


async def connect_place(spot: Mapping[str, Any]) -> Cluster:
    """A client of the cluster of a recorded place that `reachable` passed, within
    `PLACE_DEADLINE` (a credential plugin that never answers is given up on).

    Raises:
        EngineUnavailable: It cannot be loaded, or not in time.
    """
    try:
        async with asyncio.timeout(PLACE_DEADLINE):
            return await Cluster.connect(kubeconfig=spot.get("kubeconfig"),
                                         context=spot.get("context"),
                                         in_cluster=bool(spot.get("in_cluster")))
    except TimeoutError as exc:
        raise EngineUnavailable(f"loading the Kubernetes configuration took more than "
                                f"{PLACE_DEADLINE:g} s (a credential plugin that does not "
                                f"answer?)", cause=exc) from exc


async def _nothing_left(cluster: Cluster, namespace: str) -> bool:
    """Whether ``namespace`` holds none of the SDK's Pods and NetworkPolicies, of any owner."""
    for kind, template in _KINDS:
        found = await cluster.call(f"list the SDK's {kind}s", "GET", template.format(
            ns=namespace), query=[("labelSelector", f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}"),
                                  ("limit", "1")], deadline=PLACE_DEADLINE)
        if found.get("items"):
            return False
    return True


async def _retire_if_empty(cluster: Cluster, spot: Mapping[str, Any], namespace: str) -> None:
    """Drop the record of ``spot`` when nothing of ours is left there and no sandbox of this
    host holds it (`sandbox._places.retire`); a failed look keeps it."""
    try:
        if await _nothing_left(cluster, namespace) and \
                await retire(BACKEND, spot, lambda: _nothing_left(cluster, namespace)):
            log.info("gc: nothing of the SDK's is left in Kubernetes namespace %r: its record "
                     "is dropped", namespace)
    except SandboxError as exc:
        log.info("gc: keeping the record of Kubernetes namespace %r: %s", namespace, exc)


async def collect(*, dry_run: bool, older_than: timedelta | None,
                  checkpoints_older_than: timedelta | None, here: Here, now: datetime,
                  docker: Any) -> Collected:
    """The Kubernetes side of `sandbox.gc`, a `HostCollector`: in each recorded place, Pods
    and NetworkPolicies whose owner is gone. A place that cannot be reached is skipped with a
    warning (another cluster being down must not stop the collection of the rest). A place
    left with nothing of ours in it has its record dropped (`_retire_if_empty`)."""
    removed: list[GcItem] = []
    kept: list[GcItem] = []
    failed: list[GcItem] = []
    for spot in recorded(BACKEND):
        namespace = str(spot.get("namespace") or "default")
        if why := reachable(spot):
            log.info("gc: not looking in Kubernetes namespace %r: %s", namespace, why)
            continue
        try:
            cluster = await connect_place(spot)
            try:
                found = await _collect_in(cluster, namespace, dry_run=dry_run,
                                          older_than=older_than, here=here, now=now,
                                          deadline=PLACE_DEADLINE)
                if not dry_run and not found.kept and not found.failed:
                    await _retire_if_empty(cluster, spot, namespace)
            finally:
                await cluster.close()
        except SandboxError as exc:
            log.warning("gc: cannot look in Kubernetes namespace %r (kubeconfig %s): %s",
                        namespace, spot.get("kubeconfig") or "in-cluster", exc)
            continue
        removed += found.removed
        kept += found.kept
        failed += found.failed
    return Collected(removed=tuple(removed), kept=tuple(kept), failed=tuple(failed))


#: What `sandbox.gc` runs (see `sandbox._registry.PLACE_COLLECTORS`).
COLLECTOR: HostCollector = collect
