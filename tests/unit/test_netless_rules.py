"""Where a sandbox without a network gets a bare namespace (`_netless.applies`): only a body
whose every other setting leaves libnetwork nothing to write, on runc, with a writable root."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

from sandbox.docker._netless import HOSTS, SYSCTLS, applies, disable_network, hosts_tar


def body(**host: Any) -> dict[str, Any]:
    return {"Image": "x", "HostConfig": {"NetworkMode": "none", "Init": True, **host}}


def test_a_default_body_applies_and_keeps_network_mode_none() -> None:
    b = body()
    assert applies(b, runtime="runc")
    disable_network(b)
    assert b["NetworkDisabled"] is True
    assert b["HostConfig"]["NetworkMode"] == "none"
    assert b["HostConfig"]["Sysctls"] == dict(SYSCTLS)
    assert not applies(b, runtime="runc")  # once is enough


@pytest.mark.parametrize("b, runtime", [
    (body(NetworkMode="bridge"), "runc"),
    (body(NetworkMode=""), "runc"),
    (body(NetworkMode="sandbox-net"), "runc"),
    (body(), "runsc"),
    (body(), "kata-runtime"),
    (body(ReadonlyRootfs=True), "runc"),
    (body(Dns=["10.0.0.1"]), "runc"),
    (body(DnsSearch=["example"]), "runc"),
    (body(ExtraHosts=["a:10.0.0.1"]), "runc"),
    (body(Sysctls={"net.ipv4.ip_forward": "1"}), "runc"),
    (body(Binds=["/h:/etc/hosts:ro"]), "runc"),
    (body(Binds=["/h:/etc"]), "runc"),
    (body(Mounts=[{"Type": "bind", "Source": "/h", "Target": "/etc/"}]), "runc"),
    (body(Tmpfs={"/etc": ""}), "runc"),
    (body(Mounts=[{"Type": "volume", "Target": "/"}]), "runc"),
    (body(VolumesFrom=["other"]), "runc"),
    ({**body(), "Volumes": {"/etc/x": {}}}, "runc"),
], ids=lambda v: str(v)[:40])
def test_anything_else_keeps_network_mode_none_alone(b: dict[str, Any], runtime: str) -> None:
    assert not applies(b, runtime=runtime)


def test_mounts_elsewhere_still_apply() -> None:
    assert applies(body(Binds=["/h:/workspace:rw"], Tmpfs={"/tmp": "size=1m"},
                        Mounts=[{"Type": "bind", "Target": "/etcetera"}]), runtime="runc")


def test_the_hosts_tar_holds_dockers_file_as_root_0644() -> None:
    with tarfile.open(fileobj=io.BytesIO(hosts_tar())) as tf:
        (member,) = tf.getmembers()
        data = tf.extractfile(member)
        assert data is not None
        assert (member.name, member.mode, member.uid, member.gid) == ("hosts", 0o644, 0, 0)
        assert data.read() == HOSTS
    assert b"127.0.0.1\tlocalhost\n" in HOSTS
