"""Per-command users in real sandboxes, played by an attacker who spells root the way runc
reads it ("00", "+0", "000:000", ":1000") or joins a group that widens ("1000:42", shadow).

The first test checks the model of the engine's user resolution (tests/unit/_runc_user.py,
which the unit tests run every spelling through) against the engine itself.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Command,
    Sandbox,
    SandboxConfig,
    SecurityPolicy,
    SecurityViolation,
)
from tests.conftest import LABEL, docker_cli, sandbox_containers
from tests.unit._runc_user import parse_group, parse_passwd, runc_resolve

pytestmark = pytest.mark.usefixtures("engine")

#: Spellings the engine reads as root, root's group or shadow, and some it refuses.
WIDENING = ("0", "00", "+0", "-0", "000:000", "00:1000", "0:0:x", ":1000", ":", "root:1000",
            "1000:0", "1000:-0", "1000:42", "1000:shadow", "1000:+042", "sandbox:0",
            "33", "www-data", "65534:42", "1001:1000")
SPELLINGS = (*WIDENING, "1000", "+1000", "01000:1000", "1000:", "sandbox", "sandbox:sandbox",
             "nobody", "65534", "nobody:nogroup", "1000:65534", " 0", "0x0", "-1",
             "1000:4294967296", "99999999999999999999")


@pytest.fixture(scope="module")
def raw_container() -> Iterator[str]:
    """A plain container of the SDK's image, root by default, whose /etc/group makes the
    image's user a member of shadow (what a root who rewrote it would do)."""
    name = f"sandbox-test-ids-{uuid.uuid4().hex[:8]}"
    docker_cli("run", "-d", "--name", name, "--label", LABEL, "--network", "none",
               IMAGE_PYTHON, "sleep", "600")
    try:
        docker_cli("exec", name, "sed", "-i", "s/^shadow:x:42:$/shadow:x:42:sandbox/",
                   "/etc/group")
        yield name
    finally:
        docker_cli("rm", "-f", name, check=False)


def test_the_model_of_user_resolution_matches_the_engine(raw_container: str) -> None:
    passwd = parse_passwd(docker_cli("exec", raw_container, "cat", "/etc/passwd"))
    groups = parse_group(docker_cli("exec", raw_container, "cat", "/etc/group"))
    assert groups["shadow"] == (42, ["sandbox"])
    for spec in SPELLINGS:
        out = docker_cli("exec", "-u", spec, raw_container, "sh", "-c", "id -u; id -g; id -G",
                         check=False).split()
        want = runc_resolve(spec, passwd, groups)
        if want is None:
            assert len(out) != 3 or not all(w.isdigit() for w in out[:2]), (spec, out)
            continue
        uid, gid, sgids = want
        assert out[:2] == [str(uid), str(gid)], (spec, out, want)
        assert set(map(int, out[2:])) == {gid} | sgids, (spec, out, want)


async def ids(sb: Sandbox, user: str, **kw: object) -> str:
    r = await sb.execute_command(Command.shell("echo $(id -u) $(id -G)", user=user, **kw))
    assert r.success, r
    return r.stdout.strip()


async def ran_as(sb: Sandbox, users: tuple[str, ...], script: str) -> dict[str, str]:
    """Which of ``users`` a command started as (with its ``id``), rather than being refused
    with a `SecurityViolation`."""
    ran: dict[str, str] = {}
    for user in users:
        try:
            r = await sb.execute_command(Command.shell(f"{script}; id", user=user))
        except SecurityViolation:
            pass
        else:
            ran[user] = r.stdout.strip() or r.stderr.strip()
    return ran


@pytest.mark.asyncio
async def test_an_attacker_cannot_spell_root_or_join_a_group(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    cfg = SandboxConfig(image=IMAGE_PYTHON, security=SecurityPolicy(log_security_events=True))
    async with Sandbox(cfg) as sb:
        assert await ran_as(sb, WIDENING, "touch /tmp/ran-$(id -u)-$(id -g); "
                                          "cat /etc/shadow > /tmp/stolen") == {}
        with pytest.raises(SecurityViolation, match=r"uid 0 \(root\); only the sandbox's own "
                           r"ids \(1000:1000\) or nobody"):
            await sb.execute_command(Command.shell("id", user="+00"))
        r = await sb.execute_command("ls -A /tmp; test -w /usr/bin && echo usr-writable")
        assert r.stdout == "", r  # nothing ran as any of them
        # What may run: the sandbox's own ids (any spelling, no extra group) and nobody.
        for user in ("", "1000", "+1000", "01000:1000", "1000:1000", "sandbox"):
            assert await ids(sb, user) == "1000 1000", user
        for user in ("nobody", "65534", "65534:65534", "nobody:nogroup"):
            assert await ids(sb, user) == "65534 65534", user
        assert await ids(sb, "1000:65534") == "1000 65534"
        r = await sb.execute_command(Command.shell("cat /etc/shadow", user="1000"))
        assert r.exit_code != 0 and "Permission denied" in r.stderr, r
    refused = [r.audit for r in caplog.records  # type: ignore[attr-defined]
               if r.name == "sandbox.audit" and r.audit["event"] == "refused"]
    assert [r["asked"].split(" for ")[0] for r in refused] == \
        [f"user={user!r}" for user in (*WIDENING, "+00")]
    assert {r["rule"] for r in refused} == {"security.run_as_user"}


@pytest.mark.asyncio
async def test_names_are_read_once_at_create_not_from_files_the_sandbox_rewrites() -> None:
    """Images made for arbitrary uids (OpenShift's convention) leave /etc/passwd writable by
    the user: the attacker makes ``sandbox`` uid 0 and adds ``evil``. Names were turned into
    numbers at create, so neither runs as root."""
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=SecurityPolicy(run_as_user="1000"))
    async with Sandbox(cfg) as sb:
        (container,) = sandbox_containers(sb.id)
        docker_cli("exec", "-u", "0", container, "chmod", "0666", "/etc/passwd", "/etc/group")
        r = await sb.execute_command(
            # /etc itself is root's: rewrite the files in place
            "p=$(sed 's/^sandbox:x:1000:1000:/sandbox:x:0:0:/' /etc/passwd) && "
            "printf '%s\\nevil:x:0:0::/:/bin/sh\\n' \"$p\" > /etc/passwd && "
            "g=$(sed 's/^root:x:0:.*/root:x:0:sandbox/' /etc/group) && "
            "printf '%s\\n' \"$g\" > /etc/group && grep :0: /etc/passwd")
        assert r.success and "sandbox:x:0:0" in r.stdout, r
        assert await ids(sb, "sandbox") == "1000 1000"
        assert await ids(sb, "sandbox:sandbox") == "1000 1000"
        assert await ran_as(sb, ("evil", "evil:sandbox", "1000:root"), "true") == {}


@pytest.mark.asyncio
async def test_process_backend_refuses_the_same_spellings() -> None:
    cfg = SandboxConfig(type="process", image=IMAGE_BUSYBOX)
    async with Sandbox(cfg) as sb:
        assert await ran_as(sb, WIDENING, "touch /tmp/ran") == {}
        assert (await sb.execute_command("ls -A /tmp")).stdout == ""
        for user in ("1000", "+1000", "01000:1000"):
            assert await ids(sb, user) == "1000 1000", user
        r = await sb.execute_command(Command.shell("cat /etc/shadow", user="1000"))
        assert r.exit_code != 0, r
