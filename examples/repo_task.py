"""Work on a local git repository inside a sandbox: test, edit, test again, show the diff.

Shows `RepositoryConfig(local_path=..., mount_point="/workspace")`: the directory is
bind-mounted read-write, so what the sandboxed "agent" edits is edited on the host, and
`git diff` inside sees it. The sandbox runs as your uid so files it writes stay yours.

    python examples/repo_task.py
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from pathlib import Path

from sandbox import IMAGE_PYTHON, RepositoryConfig, Sandbox, SandboxConfig, SecurityPolicy

CALC = "def add(a, b):\n    return a - b\n"
TEST = '''\
import unittest

from calc import add


class AddTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)


if __name__ == "__main__":
    unittest.main()
'''


def make_repo(root: Path) -> Path:
    repo = root / "calc"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST)
    (repo / ".gitignore").write_text("__pycache__/\n")
    git = ["git", "-C", str(repo), "-c", "user.name=Example", "-c", "user.email=ex@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "add(): first version"], check=True)
    return repo


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp))
        config = SandboxConfig(
            image=IMAGE_PYTHON,
            repository=RepositoryConfig(local_path=str(repo), mount_point="/workspace"),
            security=SecurityPolicy(run_as_user=str(os.getuid()), run_as_group=str(os.getgid())),
            # No __pycache__ in the user's checkout; and a .pyc written in the same second as an
            # edit of the same size would be taken as current, hiding the fix.
            environment={"PYTHONDONTWRITEBYTECODE": "1"},
        )
        async with Sandbox(config) as sb:
            result = await sb.execute_command("python3 -m unittest 2>&1 | tail -3")
            print("tests before the fix:\n" + result.stdout)
            await sb.execute_command("sed -i 's/a - b/a + b/' calc.py")
            print("edited calc.py inside the sandbox")
            result = await sb.execute_command("python3 -m unittest")
            print(f"tests after the fix: exit {result.exit_code}, "
                  f"{result.stderr.strip().splitlines()[-1]}")
            diff = await sb.execute_command(["git", "diff"])
            print("git diff inside the sandbox:\n" + diff.stdout)
        print("calc.py on the host now reads:", (repo / "calc.py").read_text().splitlines()[1])


if __name__ == "__main__":
    asyncio.run(main())
