"""disk_limit and disk_request in the create plan (`sandbox.docker._disk`)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from sandbox._errors import SandboxInitFailed
from sandbox._models import RepositoryConfig, ResourceLimits, SecurityPolicy
from tests.unit._plan import ENGINE, host

MiB = 2**20
READ_ONLY = SecurityPolicy(read_only_root=True, tmpfs_paths=("/data:size=1m", "/cache"))


def test_read_only_root_caps_every_tmpfs_on_ext4() -> None:
    h = host(security=READ_ONLY, working_dir="/work",
             resources=ResourceLimits(disk_limit=64 * MiB))
    assert "StorageOpt" not in h
    tmpfs = h["Tmpfs"]
    assert tmpfs["/work"].endswith(f",size={64 * MiB}")
    assert tmpfs["/tmp"].endswith(f",size={64 * MiB}")
    assert tmpfs["/cache"].endswith(f",size={64 * MiB}")
    assert tmpfs["/data"].endswith(",size=1m")  # its own size is kept


def test_tmpfs_cap_must_stay_below_memory() -> None:
    with pytest.raises(SandboxInitFailed, match="count against the memory limit"):
        host(security=READ_ONLY, resources=ResourceLimits(disk_limit=64 * MiB,
                                                         memory_limit=64 * MiB))


def test_writable_root_on_ext4_refused_with_the_way_out() -> None:
    with pytest.raises(SandboxInitFailed, match="overlay2 on extfs") as caught:
        host(resources=ResourceLimits(disk_limit=64 * MiB))
    assert "read_only_root" in caught.value.details and "pquota" in caught.value.details


def test_live_writable_repository_refused() -> None:
    repo = RepositoryConfig(local_path="/src", mount_point="/work")
    with pytest.raises(SandboxInitFailed, match="mounted live and writable"):
        host(security=READ_ONLY, repository=repo,
             resources=ResourceLimits(disk_limit=64 * MiB))
    host(security=READ_ONLY, repository=attrs.evolve(repo, read_only=True),
         resources=ResourceLimits(disk_limit=64 * MiB))


def test_disk_request_checks_the_data_roots_free_space(tmp_path: Path) -> None:
    engine = attrs.evolve(ENGINE, docker_root_dir=str(tmp_path))
    host(engine, resources=ResourceLimits(disk_request=1))
    with pytest.raises(SandboxInitFailed, match=r"has \d+ bytes free, less than the"):
        host(engine, resources=ResourceLimits(disk_request=2**62))
    gone = attrs.evolve(ENGINE, docker_root_dir=str(tmp_path / "missing"))
    with pytest.raises(SandboxInitFailed, match="is not visible from here"):
        host(gone, resources=ResourceLimits(disk_request=1))
