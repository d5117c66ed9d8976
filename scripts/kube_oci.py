#!/usr/bin/env python3
"""Write a one-layer OCI image archive from a directory, for `ctr images import` (no registry).

Usage: kube_oci.py ROOTFS REF OUT.tar [--entrypoint A,B] [--cmd A,B]

scripts/kube.sh makes the cluster's pause image with it (the pause binary built from the
Kubernetes source tree), so the kubelet never needs a registry. Standard library only; the
archive is reproducible (owners 0, times 0, sorted entries).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile


def layer(root: str) -> bytes:
    """An uncompressed tar of ROOT's contents, owned by root, with fixed times."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(dirs + files):
                path = os.path.join(top, name)
                info = tar.gettarinfo(path, os.path.relpath(path, root))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                if info.isfile():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rootfs")
    ap.add_argument("ref", help="image name with tag, e.g. registry.k8s.io/pause:3.6")
    ap.add_argument("out")
    ap.add_argument("--entrypoint", default="")
    ap.add_argument("--cmd", default="")
    args = ap.parse_args()

    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": f"sha256:{digest}", "size": len(data)}

    tar_layer = blob(layer(args.rootfs))
    path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    config: dict[str, object] = {"Env": [path]}
    if args.entrypoint:
        config["Entrypoint"] = args.entrypoint.split(",")
    if args.cmd:
        config["Cmd"] = args.cmd.split(",")
    image_config = blob(json.dumps({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [tar_layer["digest"]]},
    }, sort_keys=True).encode())
    manifest = blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **image_config},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **tar_layer}],
    }, sort_keys=True).encode())
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest,
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"io.containerd.image.name": args.ref,
                        "org.opencontainers.image.ref.name": args.ref.rsplit(":", 1)[-1]},
    }]}

    def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(data))

    tmp = args.out + ".tmp"
    with tarfile.open(tmp, "w") as tar:
        add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        for digest, data in sorted(blobs.items()):
            add(tar, f"blobs/sha256/{digest}", data)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
