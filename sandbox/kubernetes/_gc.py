"""Collect sandbox Pods and NetworkPolicies whose owner process is gone, found by label.

The owner (host, boot id, pid, pid start) is in the objects' annotations; the verdict is the
Docker gc's (`sandbox._gc.owner_verdict`): only an owner provably gone from this host is
collected. Pods are reported as ``container`` items, NetworkPolicies as ``network`` items.
Each delete has grace period 0 and the listed uid as precondition (see `delete_options`): an
orphan's keep-alive has no owner to finish for, and a default 30 s grace would leave it
Terminating (holding its node resources) after gc said it was removed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs

from .._constants import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE
from .._errors import ConfigError, SandboxError
from .._gc import GcReport
from .._owner import GcItem, Here, owner_verdict
from .._wire_time import engine_time
from ._gateway import Cluster, KubeConflict, KubeNotFound, delete_options

__all__ = ["gc"]

_KINDS = (("container", "/api/v1/namespaces/{ns}/pods"),
          ("network", "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"))


async def gc(*, namespace: str = "default", kubeconfig: str | None = None,
             context: str | None = None, in_cluster: bool = False, dry_run: bool = False,
             older_than: timedelta | None = None) -> GcReport:
    """Delete the SDK's Pods and NetworkPolicies in ``namespace`` whose owner is gone.

    Raises:
        EngineUnavailable: The API server cannot be reached.
        ConfigError: ``older_than`` is negative.
    """
    if older_than is not None and older_than < timedelta(0):
        raise ConfigError(f"older_than must be >= 0, got {older_than}")
    cluster = await Cluster.connect(kubeconfig=kubeconfig, context=context,
                                    in_cluster=in_cluster)
    here, now = Here.current(), datetime.now(UTC)
    removed: dict[str, list[GcItem]] = {"container": [], "network": []}
    kept: dict[str, list[GcItem]] = {"container": [], "network": []}
    failed: list[GcItem] = []
    try:
        for kind, template in _KINDS:
            path = template.format(ns=namespace)
            found = await cluster.call(f"list the SDK's {kind}s", "GET", path, query=[
                ("labelSelector", f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}")])
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
                                           body=delete_options(str(meta.get("uid") or "")))
                    except (KubeNotFound, KubeConflict):
                        pass  # gone already, or the name now belongs to another object
                    except SandboxError as exc:
                        failed.append(attrs.evolve(item, reason=f"{reason}, but removing it "
                                                                f"failed: {exc}"))
                        continue
                removed[kind].append(item)
    finally:
        await cluster.close()
    return GcReport(dry_run=dry_run, removed=(*removed["container"], *removed["network"]),
                    kept=(*kept["container"], *kept["network"]), failed=tuple(failed))
