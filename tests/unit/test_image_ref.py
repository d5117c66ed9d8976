"""Image references parse and normalize as Docker 20.10 does."""

from __future__ import annotations

import pytest

from sandbox._errors import ConfigError
from sandbox._image_ref import ImageRef, parse_image_ref

HEX64 = "a" * 64
DIGEST = f"sha256:{HEX64}"

GOOD = [
    # (reference, domain, path, tag, digest, full, engine_name)
    ("alpine", "docker.io", "library/alpine", "latest", "",
     "docker.io/library/alpine:latest", "alpine:latest"),
    ("alpine:3.19", "docker.io", "library/alpine", "3.19", "",
     "docker.io/library/alpine:3.19", "alpine:3.19"),
    ("sandbox-busybox:latest", "docker.io", "library/sandbox-busybox", "latest", "",
     "docker.io/library/sandbox-busybox:latest", "sandbox-busybox:latest"),
    ("library/alpine", "docker.io", "library/alpine", "latest", "",
     "docker.io/library/alpine:latest", "alpine:latest"),
    ("docker.io/library/alpine", "docker.io", "library/alpine", "latest", "",
     "docker.io/library/alpine:latest", "alpine:latest"),
    ("index.docker.io/foo/bar", "docker.io", "foo/bar", "latest", "",
     "docker.io/foo/bar:latest", "foo/bar:latest"),
    ("foo/bar", "docker.io", "foo/bar", "latest", "",
     "docker.io/foo/bar:latest", "foo/bar:latest"),
    ("docker.io/library/a/b", "docker.io", "library/a/b", "latest", "",
     "docker.io/library/a/b:latest", "library/a/b:latest"),
    ("localhost/foo", "localhost", "foo", "latest", "",
     "localhost/foo:latest", "localhost/foo:latest"),
    ("localhost:5000/foo/bar:1.0", "localhost:5000", "foo/bar", "1.0", "",
     "localhost:5000/foo/bar:1.0", "localhost:5000/foo/bar:1.0"),
    (f"registry.example.com:443/a/b@{DIGEST}", "registry.example.com:443", "a/b", "", DIGEST,
     f"registry.example.com:443/a/b@{DIGEST}", f"registry.example.com:443/a/b@{DIGEST}"),
    (f"alpine:3@{DIGEST}", "docker.io", "library/alpine", "3", DIGEST,
     f"docker.io/library/alpine:3@{DIGEST}", f"alpine:3@{DIGEST}"),
    (f"alpine@{DIGEST}", "docker.io", "library/alpine", "", DIGEST,
     f"docker.io/library/alpine@{DIGEST}", f"alpine@{DIGEST}"),
    ("[::1]:5000/foo:t", "[::1]:5000", "foo", "t", "",
     "[::1]:5000/foo:t", "[::1]:5000/foo:t"),
    ("Registry.Example.com/foo", "Registry.Example.com", "foo", "latest", "",
     "Registry.Example.com/foo:latest", "Registry.Example.com/foo:latest"),
    ("g/a.b_c__d-e---f", "docker.io", "g/a.b_c__d-e---f", "latest", "",
     "docker.io/g/a.b_c__d-e---f:latest", "g/a.b_c__d-e---f:latest"),
    ("a.b/c", "a.b", "c", "latest", "", "a.b/c:latest", "a.b/c:latest"),
    ("foo:_T.a-g", "docker.io", "library/foo", "_T.a-g", "",
     "docker.io/library/foo:_T.a-g", "foo:_T.a-g"),
    (f"foo:{'t' * 128}", "docker.io", "library/foo", "t" * 128, "",
     f"docker.io/library/foo:{'t' * 128}", f"foo:{'t' * 128}"),
    (f"foo@sha512:{'b' * 128}", "docker.io", "library/foo", "", f"sha512:{'b' * 128}",
     f"docker.io/library/foo@sha512:{'b' * 128}", f"foo@sha512:{'b' * 128}"),
]


@pytest.mark.parametrize(
    ("ref", "domain", "path", "tag", "digest", "full", "engine_name"),
    GOOD,
    ids=[g[0][:40] for g in GOOD],
)
def test_good_references(
    ref: str, domain: str, path: str, tag: str, digest: str, full: str, engine_name: str
) -> None:
    parsed = parse_image_ref(ref)
    assert parsed == ImageRef(domain=domain, path=path, tag=tag, digest=digest)
    assert parsed.full == full
    assert str(parsed) == full
    assert parsed.engine_name == engine_name


def test_repository_name_is_familiar_form() -> None:
    assert parse_image_ref("docker.io/library/alpine:3").repository_name == "alpine"
    assert parse_image_ref("localhost:5000/a/b").repository_name == "localhost:5000/a/b"
    assert parse_image_ref("docker.io/library/alpine").name == "docker.io/library/alpine"


BAD = [
    # (reference, fragment of the message)
    ("", "must not be empty"),
    ("UPPER", "must be lowercase"),
    ("UPPER/case", "must be lowercase"),
    ("foo/Bar:1", "must be lowercase"),
    ("a:b:c", "path component 'a:b'"),
    ("foo@sha256:abc", "64 lowercase hex"),
    (f"foo@sha256:{'A' * 64}", "64 lowercase hex"),
    (f"foo@md5:{HEX64}", "not supported"),
    ("foo@sha256", "must look like"),
    ("foo@", "must look like"),
    (f"foo@{DIGEST}@{DIGEST}", "more than one '@'"),
    ("foo:", "tag ''"),
    ("foo:-bad", "tag '-bad'"),
    ("foo:.bad", "tag '.bad'"),
    (f"foo:{'t' * 129}", "tag"),
    ("foo:ta/g", "registry host 'foo:ta'"),
    (":tag", "must not be empty"),
    ("foo//bar", "path component ''"),
    ("foo/", "path component ''"),
    ("/foo", "path component ''"),
    ("-foo", "path component '-foo'"),
    ("foo-", "path component 'foo-'"),
    ("foo..bar", "path component 'foo..bar'"),
    ("foo___bar", "path component 'foo___bar'"),
    ("exa_mple.com:5000/foo", "registry host 'exa_mple.com:5000'"),
    ("host:port/foo", "registry host 'host:port'"),
    (" alpine", "whitespace"),
    (HEX64, "image ID"),
    ("a" * 256, "longer than 255"),
]


@pytest.mark.parametrize(("ref", "fragment"), BAD, ids=[b[0][:40] or "empty" for b in BAD])
def test_bad_references(ref: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_image_ref(ref)
    message = str(info.value)
    assert f"invalid image reference {ref!r}" in message
    assert fragment in message
    assert isinstance(info.value, ValueError)


def test_name_limit_counts_normalized_name() -> None:
    # 255 exactly is fine; docker.io/ plus 246 characters is 256.
    ok = "x/" + "a" * (255 - len("docker.io/x/"))
    assert parse_image_ref(ok).path == ok
    with pytest.raises(ConfigError, match="longer than 255"):
        parse_image_ref(ok + "a")
