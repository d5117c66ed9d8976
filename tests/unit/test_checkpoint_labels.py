"""What a checkpoint image's labels may hold: no environment value, no URL credential, and
the owner of a fork's image under keys a container made from it cannot take for its own."""

from __future__ import annotations

import json

from sandbox import NetworkConfig, RepositoryConfig, Sandbox, SandboxConfig
from sandbox._checkpoint import (
    LABEL_CHECKPOINT_CONFIG,
    checkpoint_labels,
    fork_owner,
    parse_checkpoint,
    shareable,
)
from sandbox._constants import LABEL_OWNER_PID
from sandbox.testing import FakeBackend

SECRETS = ("v4lue", "t0ken", "pr0xypw", "pa55")
CONFIG = SandboxConfig(
    environment={"SECRET": "v4lue", "MODE": "x"},
    repository=RepositoryConfig(url="https://t0ken@example.com/r.git"),
    network=NetworkConfig(http_proxy="http://u:pr0xypw@proxy:3128",
                          https_proxy="socks5://u:pa55@proxy:1080"))


def test_shareable_withholds_values_and_credentials_and_names_them() -> None:
    config, withheld = shareable(CONFIG)
    assert config.environment == {}
    assert config.repository is not None and config.repository.url == "https://example.com/r.git"
    assert config.network.http_proxy == "http://proxy:3128"
    assert config.network.https_proxy == "socks5://u@proxy:1080"
    assert withheld == ("environment.MODE", "environment.SECRET", "repository.url credentials",
                        "network.http_proxy credentials", "network.https_proxy credentials")
    plain = SandboxConfig(repository=RepositoryConfig(url="git@example.com:r.git"))
    assert shareable(plain) == (plain, ())


def test_labels_hold_no_secret_and_a_fork_owner_only_when_owned() -> None:
    sb = Sandbox(backend=FakeBackend(CONFIG))
    for owned in (False, True):
        labels = checkpoint_labels(sb, "n", memory=False, fork=True, owned=owned)
        text = json.dumps(labels)
        assert not [s for s in SECRETS if s in text]
        assert labels[LABEL_OWNER_PID] == ""  # containers from it inherit these: never set
        assert bool(fork_owner(labels)) is owned
    point = parse_checkpoint({"Id": "sha256:1", "Labels": labels})
    assert point is not None and point.withheld[:2] == ("environment.MODE", "environment.SECRET")
    assert point.source_config is not None and point.source_config.environment == {}
    assert json.loads(labels[LABEL_CHECKPOINT_CONFIG])["environment"] == {}
    kept = checkpoint_labels(sb, "n", memory=False, fork=True, owned=False)
    assert fork_owner({**labels, **kept}) == {}  # a kept one made from an owned one's image
