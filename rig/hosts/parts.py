"""A file cut into parts of at most a chosen size (a host that accepts only small files takes
them one at a time) and put back together, every part and the whole checked by sha256."""

from __future__ import annotations

import re
from pathlib import Path

from rig.errors import Invalid

_SIZE = re.compile(r"(?P<number>[1-9][0-9]{0,6})(?P<unit>KiB|MiB|GiB)")
_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
MIN_PART = 1 << 20


def part_size(text: str) -> int:
    """`60MiB` -> bytes; a part of under 1 MiB or over 4 GiB is refused."""
    found = _SIZE.fullmatch(text.strip())
    size = int(found["number"]) * _UNITS[found["unit"]] if found else 0
    if not MIN_PART <= size <= 4 * _UNITS["GiB"]:
        raise Invalid("--part-size", text, "not a size between 1MiB and 4GiB", "write it as e.g. 60MiB")
    return size


def cut(source: Path, folder: Path, size: int, stem: str) -> list[Path]:
    """`source` as `folder/part-NN/stem.NN` files of at most `size` bytes each (one folder a part,
    so each can travel on its own)."""
    out: list[Path] = []
    with source.open("rb") as handle:
        index = 1
        while block := handle.read(size):
            target = folder / f"part-{index:02d}" / f"{stem}.{index:02d}"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(block)
            out.append(target)
            index += 1
    return out
