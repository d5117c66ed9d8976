"""Parse and normalize image references with Docker's grammar (distribution/reference).

Grammar, as implemented here::

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ domain "/" ] path          (at most 255 characters once normalized)
    domain     := host [ ":" port ]            host: DNS name, or [IPv6]
    path       := component ( "/" component )*
    component  := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
    digest     := algorithm ":" hex            sha256: 64, sha384: 96, sha512: 128 lowercase hex

The part before the first ``/`` is a domain only when it contains ``.`` or ``:`` or is
``localhost``; otherwise the domain is ``docker.io`` and a single-component path gets the
``library/`` prefix. As in Docker 20.10, ``UPPER/case`` is an invalid name, not a registry host
(newer Docker reads an uppercase first component as a host). ``index.docker.io``
is rewritten to ``docker.io``. Without a tag and a digest the tag is ``latest``.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

from ._errors import ConfigError

__all__ = ["ImageRef", "parse_image_ref"]

DEFAULT_DOMAIN: Final = "docker.io"
_LEGACY_DEFAULT_DOMAIN: Final = "index.docker.io"
_OFFICIAL_PREFIX: Final = "library/"
DEFAULT_TAG: Final = "latest"
#: Longest name (domain and path, without tag or digest) the engine accepts.
NAME_MAX_LENGTH: Final = 255

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(
    rf"(?:{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_DIGEST_ALGORITHM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*")
#: Hex length of each digest algorithm the engine can verify (go-digest's registry).
_DIGEST_HEX_LENGTH: Final = {"sha256": 64, "sha384": 96, "sha512": 128}
_LOWER_HEX = re.compile(r"[a-f0-9]+")
_IMAGE_ID = re.compile(r"[a-f0-9]{64}")


@attrs.frozen(kw_only=True)
class ImageRef:
    """A parsed, normalized image reference.

    Attributes:
        domain: Registry host, with port if any, e.g. ``"docker.io"`` or ``"localhost:5000"``.
        path: Repository path inside the registry, e.g. ``"library/alpine"``.
        tag: Tag; ``"latest"`` when neither tag nor digest was given, ``""`` for a bare digest.
        digest: Content digest such as ``"sha256:<64 hex>"``, or ``""``.
    """

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """Fully qualified repository name, e.g. ``docker.io/library/alpine``."""
        return f"{self.domain}/{self.path}"

    @property
    def repository_name(self) -> str:
        """Repository in Docker's short (familiar) form, e.g. ``alpine`` or ``foo/bar``."""
        if self.domain != DEFAULT_DOMAIN:
            return self.name
        path = self.path
        # Only a single remaining component drops "library/": docker.io/library/a/b stays long.
        if path.startswith(_OFFICIAL_PREFIX) and "/" not in path[len(_OFFICIAL_PREFIX) :]:
            return path[len(_OFFICIAL_PREFIX) :]
        return path

    @property
    def full(self) -> str:
        """Normalized reference, e.g. ``docker.io/library/alpine:latest``."""
        return self._with_suffix(self.name)

    @property
    def engine_name(self) -> str:
        """Reference to give the engine; the short form, as ``docker images`` lists local images."""
        return self._with_suffix(self.repository_name)

    def _with_suffix(self, name: str) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{name}{tag}{digest}"

    def __str__(self) -> str:
        return self.full


def _invalid(ref: str, reason: str) -> ConfigError:
    return ConfigError(f"invalid image reference {ref!r}: {reason}")


def _check_digest(ref: str, digest: str) -> None:
    algorithm, sep, encoded = digest.partition(":")
    if not sep or not _DIGEST_ALGORITHM.fullmatch(algorithm) or not encoded:
        raise _invalid(ref, f"digest {digest!r} must look like 'sha256:<64 hex digits>'")
    length = _DIGEST_HEX_LENGTH.get(algorithm)
    if length is None:
        known = ", ".join(_DIGEST_HEX_LENGTH)
        raise _invalid(ref, f"digest algorithm {algorithm!r} is not supported (use {known})")
    if len(encoded) != length or not _LOWER_HEX.fullmatch(encoded):
        raise _invalid(
            ref, f"{algorithm} digest needs {length} lowercase hex digits, got {encoded!r}"
        )


def _split_domain(name: str) -> tuple[str, str]:
    """Split off the domain exactly where Docker's ParseNormalizedNamed does."""
    first, slash, rest = name.partition("/")
    if slash and (any(c in first for c in ".:") or first == "localhost"):
        return first, rest
    return DEFAULT_DOMAIN, name


def parse_image_ref(ref: str) -> ImageRef:
    """Parse an image reference and normalize it the way the Docker CLI does.

    Raises:
        ConfigError: The reference is empty, too long, or breaks the grammar; the message
            names the reference and the part that is wrong.
    """
    if not ref:
        raise _invalid(ref, "repository name must not be empty")
    if ref != ref.strip():
        raise _invalid(ref, "leading or trailing whitespace")
    name, at, digest = ref.partition("@")
    if at:
        if "@" in digest:
            raise _invalid(ref, "more than one '@'")
        _check_digest(ref, digest)
    tag = ""
    colon = name.rfind(":")
    # A colon before the last slash is a registry port, not a tag separator.
    if colon > name.rfind("/"):
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise _invalid(
                ref,
                f"tag {tag!r} must be 1-128 of [A-Za-z0-9_.-] and must not start with '.' or '-'",
            )
    if not name:
        raise _invalid(ref, "repository name must not be empty")
    domain, path = _split_domain(name)
    if domain != DEFAULT_DOMAIN and not _DOMAIN.fullmatch(domain):
        raise _invalid(ref, f"registry host {domain!r} is not a valid host[:port]")
    components = path.split("/")
    for component in components:
        if _COMPONENT.fullmatch(component):
            continue
        if _COMPONENT.fullmatch(component.lower()):
            raise _invalid(ref, "repository name must be lowercase")
        raise _invalid(
            ref,
            f"path component {component!r} must be lowercase letters and digits, separated by "
            "'.', '_', '__' or '-'",
        )
    if domain == DEFAULT_DOMAIN and name == path and _IMAGE_ID.fullmatch(path):
        raise _invalid(ref, "a 64-digit hex string is an image ID, not a repository name")
    if domain == _LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and len(components) == 1:
        path = _OFFICIAL_PREFIX + path
    # Docker measures the normalized name, so "docker.io/library/" counts too.
    if len(domain) + 1 + len(path) > NAME_MAX_LENGTH:
        raise _invalid(ref, f"repository name is longer than {NAME_MAX_LENGTH} characters")
    if not tag and not digest:
        tag = DEFAULT_TAG
    return ImageRef(domain=domain, path=path, tag=tag, digest=digest)
