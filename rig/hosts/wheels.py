"""A wheel rewritten without some of its files: the same entries in the same order, less the
left-out ones, with its RECORD rewritten to match, so pip installs it and `pip check`/RECORD
verification still hold. Deterministic: the same wheel and globs give the same bytes."""

from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import io
import zipfile
from collections.abc import Callable
from pathlib import Path

from rig.errors import Damaged
from rig.hosts import hostside

FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # every entry's date: a rebuilt wheel's bytes do not depend on when


sha256_file = hostside.sha256_of  # one reading of a file's sha256, here and on the host


def _record_name(names: list[str]) -> str:
    records = [name for name in names if name.endswith(".dist-info/RECORD") and name.count("/") == 1]
    if len(records) != 1:
        raise Damaged("wheel", "RECORD", f"{len(records)} .dist-info/RECORD files", "download the wheel again")
    return records[0]


def matching(wheel: Path, globs: list[str]) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [name for name in archive.namelist() if any(fnmatch.fnmatchcase(name, glob) for glob in globs)]


Transform = Callable[[str, bytes], bytes | None]  # (entry name, bytes) -> new bytes, or None: unchanged


def without(wheel: Path, globs: list[str], out: Path, transform: Transform | None = None) -> list[str]:
    """Write `wheel` less the entries matching `globs` to `out` (same file name), each kept entry
    passed through `transform`; return those left out. A glob that matches nothing is not an error
    here: the caller says which globs were unused."""
    left_out: list[str] = []
    buffer = io.StringIO()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as target:
        names = source.namelist()
        record = _record_name(names)
        kept_rows = [row for row in csv.reader(io.StringIO(source.read(record).decode()))
                     if row and not any(fnmatch.fnmatchcase(row[0], glob) for glob in globs)]
        changed: dict[str, bytes] = {}
        for info in source.infolist():
            if info.filename == record:
                continue
            if any(fnmatch.fnmatchcase(info.filename, glob) for glob in globs):
                left_out.append(info.filename)
                continue
            data = source.read(info.filename)
            new = transform(info.filename, data) if transform else None
            if new is not None:
                changed[info.filename], data = new, new
            entry = zipfile.ZipInfo(info.filename, FIXED_TIME)
            entry.external_attr = info.external_attr
            entry.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(entry, data)
        for row in kept_rows:
            if row[0] in changed:
                row[1:3] = [record_hash(changed[row[0]]), str(len(changed[row[0]]))]
        csv.writer(buffer, lineterminator="\n").writerows(kept_rows)
        entry = zipfile.ZipInfo(record, FIXED_TIME)
        entry.compress_type = zipfile.ZIP_DEFLATED
        target.writestr(entry, buffer.getvalue())
    return left_out


def record_hash(data: bytes) -> str:
    """A RECORD row's hash field for `data` (urlsafe base64 sha256, no padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
