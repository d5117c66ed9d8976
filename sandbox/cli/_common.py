"""What every ``sandbox`` subcommand shares: the config flags and how they become a
`SandboxConfig`, usage errors, and the report of a run ended by a signal."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import attrs

from .._constants import DEFAULT_WORKING_DIR
from .._errors import ConfigError
from .._json import from_json
from .._models import RepositoryConfig, SandboxConfig
from .._progress import PullProgress
from .._sandbox import Sandbox
from .._signals import signal_name

__all__ = ["EXIT_TIMEOUT", "add_config_flags", "config_from_args", "parse_size", "positive",
           "sandbox_for", "terminated", "usage_error"]

#: Exit status of a command killed by ``--timeout``, like GNU timeout's.
EXIT_TIMEOUT = 124
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kmgt]?)(i?b)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Parse a memory size: bytes, or a number with k, m, g or t (powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use a number with an optional unit, like 512m or 1g")
    number, unit = float(match[1]), match[2].lower()
    return int(number * 1024 ** "_kmgt".index(unit)) if unit else int(number)


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_config_flags(p: argparse.ArgumentParser, *, timeout: bool) -> None:
    g = p.add_argument_group("sandbox configuration (flags override --config)")
    g.add_argument("--config", metavar="FILE",
                   help="a SandboxConfig as JSON (the format of `sandbox config --json`)")
    g.add_argument("--image", help="image to run (default: the config's, sandbox-python:latest)")
    g.add_argument("--memory", type=parse_size, metavar="SIZE",
                   help="memory limit, e.g. 512m or 1g")
    g.add_argument("--cpus", type=positive, metavar="N", help="CPU limit in cores, e.g. 1.5")
    g.add_argument("--network", action="store_true",
                   help="give the sandbox a network (isolated by default)")
    g.add_argument("--mount", metavar="PATH[:ro]",
                   help=f"bind-mount a host directory at {DEFAULT_WORKING_DIR} (read-only "
                   "with :ro); edits made inside are made to it")
    if timeout:
        g.add_argument("--timeout", type=positive, metavar="SECONDS",
                       help=f"kill the command and all it started after SECONDS; exit status "
                       f"{EXIT_TIMEOUT}")


def usage_error(args: argparse.Namespace, message: str) -> NoReturn:
    parser: argparse.ArgumentParser = args.parser
    parser.error(message)


def config_from_args(args: argparse.Namespace) -> SandboxConfig:
    """Build the SandboxConfig: the --config file (or the defaults), then the flags."""
    try:
        config = SandboxConfig()
        if args.config:
            try:
                text = Path(args.config).read_text()
            except OSError as exc:
                usage_error(args, f"cannot read --config {args.config!r}: {exc.strerror}")
            config = from_json(text, SandboxConfig)
        changes: dict[str, Any] = {}
        if args.image:
            changes["image"] = args.image
        limits: dict[str, Any] = {}
        if args.memory is not None:
            limits["memory_limit"] = args.memory
        if args.cpus is not None:
            limits["cpu_limit"] = args.cpus
        if limits:
            changes["resources"] = attrs.evolve(config.resources, **limits)
        if args.network:
            changes["network"] = attrs.evolve(config.network, isolated=False)
            changes["security"] = attrs.evolve(config.security, allow_networking=True,
                                               isolate_network=False)
        if args.mount:
            path, ro = args.mount, False
            if path.endswith((":ro", ":rw")):
                path, ro = path[:-3], path.endswith(":ro")
            if not Path(path).is_dir():
                usage_error(args, f"--mount {args.mount!r}: {path!r} is not a directory")
            changes["repository"] = RepositoryConfig(
                local_path=str(Path(path).resolve()), mount_point=config.working_dir,
                read_only=ro)
        if getattr(args, "timeout", None) is not None:
            changes["timeout"] = args.timeout
        return attrs.evolve(config, **changes) if changes else config
    except ConfigError as exc:
        usage_error(args, str(exc))


def terminated(args: argparse.Namespace, exc: SystemExit) -> int:
    """SIGTERM or SIGHUP ended the run after cleanup: say so, exit with 128+signal."""
    code = exc.code if isinstance(exc.code, int) else 1
    print(f"sandbox {args.command}: {signal_name(code) or 'terminated'} received; the sandbox "
          "was removed", file=sys.stderr)
    return code


def sandbox_for(config: SandboxConfig, progress: PullProgress) -> Sandbox:
    """A sandbox for ``config``; a Docker one shows image pull progress."""
    if config.type != "docker":
        return Sandbox(config)
    from ..docker import DockerBackend

    return Sandbox(backend=DockerBackend(config, on_pull_progress=progress))
