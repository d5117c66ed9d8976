"""copy_files into a sandbox on the real engine: docker cp's placement rules, files owned by the
sandbox user, and a host tree whose links point out of it giving nothing away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, FileOperationFailed, Sandbox, SandboxConfig

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


def host_tree(root: Path) -> Path:
    secret = root / "secret.txt"
    secret.write_text("host secret\n")
    (root / "private").mkdir()
    (root / "private" / "key").write_text("private key\n")
    src = root / "proj"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("print('x')\n")
    (src / "pkg" / "sub" / "deep.txt").write_text("deep\n")
    (src / "run.sh").write_text("#!/bin/sh\necho run\n")
    (src / "run.sh").chmod(0o755)
    os.utime(src / "run.sh", (1_600_000_000.5, 1_600_000_000.5))
    (src / "empty").mkdir()
    (src / "leak-file").symlink_to(secret)
    (src / "leak-dir").symlink_to(root / "private")
    (src / "inner").symlink_to("pkg/mod.py")
    return src


@pytest.mark.parametrize("image", [IMAGE_BUSYBOX, IMAGE_PYTHON])
async def test_copy_in_places_like_docker_cp_and_the_sandbox_user_owns_it(
        tmp_path: Path, image: str) -> None:
    src = host_tree(tmp_path)
    async with Sandbox(SandboxConfig(image=image, stats_interval=0)) as sb:
        run = sb.execute_command
        # A directory into an existing directory: under its own name.
        await sb.copy_files(str(src), "sandbox:/workspace")
        # A directory to a path that does not exist: it becomes that path.
        await sb.copy_files(str(src), "sandbox:/workspace/new/deeper")
        # Again over the first copy: merged, no error.
        await sb.copy_files(str(src), "sandbox:/workspace")
        # A file into a directory, to a new name, and over an existing file.
        await sb.copy_files(str(src / "run.sh"), "sandbox:/workspace/new")
        await sb.copy_files(str(src / "run.sh"), "sandbox:renamed.sh")
        await sb.copy_files(str(src / "pkg" / "mod.py"), "sandbox:renamed.sh")
        listing = await run("cd /workspace && find . | sort")
        assert listing.stdout.split() == [
            ".", "./new", "./new/deeper", "./new/deeper/empty", "./new/deeper/inner",
            "./new/deeper/leak-dir", "./new/deeper/leak-file", "./new/deeper/pkg",
            "./new/deeper/pkg/mod.py", "./new/deeper/pkg/sub", "./new/deeper/pkg/sub/deep.txt",
            "./new/deeper/run.sh", "./new/run.sh",
            "./proj", "./proj/empty", "./proj/inner", "./proj/leak-dir", "./proj/leak-file",
            "./proj/pkg", "./proj/pkg/mod.py", "./proj/pkg/sub", "./proj/pkg/sub/deep.txt",
            "./proj/run.sh", "./renamed.sh"], listing.stdout
        out = await run("./proj/run.sh && ./new/deeper/run.sh && cat renamed.sh proj/inner "
                        "new/deeper/pkg/sub/deep.txt")
        assert out.stdout == "run\nrun\nprint('x')\nprint('x')\ndeep\n", out
        # The sandbox user owns every copy; modes and whole-second mtimes as on the host.
        owners = await run("find /workspace -mindepth 1 ! -user 1000")
        assert owners.stdout == "" and owners.exit_code == 0, owners
        meta = await run("stat -c '%a %Y' proj/run.sh new/run.sh")
        assert meta.stdout == "755 1600000000\n755 1600000000\n", meta
        # The links are links: their targets are host paths the sandbox cannot read.
        links = await run("readlink proj/leak-file; readlink proj/leak-dir; "
                          "cat proj/leak-file; ls proj/leak-dir/")
        assert links.stdout.split("\n")[:2] == [str(tmp_path / "secret.txt"),
                                                str(tmp_path / "private")], links
        leaked = await run("grep -r -e 'host secret' -e 'private key' /workspace; echo $?")
        assert leaked.stdout.strip().endswith("1"), leaked
        # A directory onto a file is refused, the file left as it was.
        with pytest.raises(FileOperationFailed):
            await sb.copy_files(str(src), "sandbox:renamed.sh")
        assert (await run("cat renamed.sh")).stdout == "print('x')\n"
