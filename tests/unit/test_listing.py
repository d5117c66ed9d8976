"""parse_listing on hostile bytes: the list helper's output comes from a sandbox whose root may
have replaced stat or sh, so garbage must give a clear FileOperationFailed, never a crash or an
entry outside the listed directory."""

from __future__ import annotations

import json

import pytest

from sandbox import FileOperationFailed, to_json
from sandbox import _helper_files as _files
from sandbox._helper_files import parse_listing, resolve

FIELDS = b"81a4:3:1700000000:0:0:root:root"


def rec(name: bytes, fields: bytes = FIELDS, target: bytes = b"") -> bytes:
    return name + b"\0" + fields + b"\0" + target + b"\0"


def test_names_with_newlines_control_characters_and_bad_utf8() -> None:
    names = [b"new\nline.txt", b"cr\r", b"tab\t", b"esc\x1b[31m", b"bad\xff\xfe",
             b"\xc3\xa9t\xc3\xa9"]
    infos = parse_listing(b"".join(rec(b"/d/" + n) for n in names), "/d")
    assert [i.name for i in infos] == ["new\nline.txt", "cr\r", "tab\t", "esc\x1b[31m",
                                       "bad\ufffd\ufffd", "été"]
    assert [i.path for i in infos] == ["/d/" + i.name for i in infos]
    json.loads(to_json(infos[4]))  # U+FFFD keeps it serializable


def test_symlink_target_with_a_forged_looking_record_is_just_a_target() -> None:
    forged = b"x\n81a4/9/0/0/0/root/root//etc/shadow\n->y"
    infos = parse_listing(rec(b"/d/l", b"a1ff:1:1:0:0:root:root", forged), "/d")
    assert len(infos) == 1
    assert infos[0].is_symlink and infos[0].link_target == forged.decode()


def test_single_entry_and_root() -> None:
    assert parse_listing(rec(b"/d/f"), "/d/f")[0].path == "/d/f"
    (info,) = parse_listing(rec(b"/x"), "/")
    assert (info.name, info.path) == ("x", "/x")
    (info,) = parse_listing(rec(b"/", b"41ed:0:0:0:0:root:root"), "/")
    assert (info.name, info.path, info.is_dir) == ("/", "/", True)
    assert parse_listing(b"", "/d") == []
    big = parse_listing(rec(b"/d/a", b"81a4:9223372036854775807:1:0:0:r:r"), "/d")
    assert big[0].size == (1 << 63) - 1


@pytest.mark.parametrize("data", [
    b"garbage",                                           # no NUL at all
    rec(b"/d/a")[:-1],                                    # last record cut short
    rec(b"/d/a") + b"/d/b\0",                             # a record missing two fields
    rec(b"/etc/shadow"),                                  # outside the listed directory
    rec(b"/d/../etc"), rec(b"/d/.."), rec(b"/d/."), rec(b"/d/"), rec(b"/d/a/b"),
    rec(b"/dd/a"), rec(b"d/a"), rec(b""),
    rec(b"/d/a", b"zz:3:1:0:0:r:r"),                      # mode not hex
    rec(b"/d/a", b"81a4:-3:1:0:0:r:r"),                   # negative size
    rec(b"/d/a", b"81a4:99999999999999999999:1:0:0:r:r"),  # size past int64
    rec(b"/d/a", b"fffff:3:1:0:0:r:r"),                   # mode past 16 bits
    rec(b"/d/a", b"81a4:3:999999999999:0:0:r:r"),         # year past 9999
    rec(b"/d/a", b"81a4:3:-999999999999:0:0:r:r"),
    rec(b"/d/a", b"81a4:3:1.5:0:0:r:r"),
    rec(b"/d/a", b"81a4:3:1:x:0:r:r"),
    rec(b"/d/a", b"81a4:3:1:0:0:r"),                      # a field missing
    rec(b"/d/a", b"81a4:3:1:0:0:r:r:extra"),
    rec(b"/d/a", b"81a4:3:1:0:0:r:r\n81a4:3:1:0:0:r:r"),
    rec(b"/d/a", b""),
])
def test_garbage_is_a_clear_error(data: bytes) -> None:
    with pytest.raises(FileOperationFailed, match=r"list '/d' failed: the listing .* "
                                                   r"malformed \(has a tool"):
        parse_listing(data, "/d")


def test_entry_count_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_files, "MAX_LIST_ENTRIES", 3)
    assert len(parse_listing(b"".join(rec(b"/d/%d" % i) for i in range(3)), "/d")) == 3
    with pytest.raises(FileOperationFailed, match="more than 3 entries"):
        parse_listing(b"".join(rec(b"/d/%d" % i) for i in range(4)), "/d")


def test_resolve_refuses_nul_and_lone_surrogates() -> None:
    with pytest.raises(FileOperationFailed, match="NUL"):
        resolve("/w", "a\0b")
    with pytest.raises(FileOperationFailed, match="not valid Unicode"):
        resolve("/w", "bad\udcff")
