"""GPU code pruned to one architecture: in a shared library's `.nv_fatbin` section, the payload
of every image a GPU of the target architecture never loads becomes zeros. Every header, offset
and size stays, so the ELF and the CUDA runtime read the file as before; the zeros compress to
almost nothing in the wheel.

Kept: SASS (ELF) images built for the target (sm_90 keeps arch 90, `sm_90a` included) and PTX
images at or below it (the driver may JIT them). Zeroed: SASS for any other architecture (a GPU
runs SASS of its own major.minor only) and PTX newer than the target (it cannot JIT it).

The layout read here is the fatbin container's: a 16-byte header (magic 0xBA55ED50, version,
header size, size of what follows) and then images, each with its own header (kind 1 = PTX,
2 = ELF; header size; payload size; the architecture at byte 28).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rig.errors import Damaged

MAGIC = 0xBA55ED50
PTX, ELF = 1, 2


@dataclass
class Image:
    kind: int
    arch: int
    payload_at: int
    payload_size: int


@dataclass
class Pruned:
    images: int
    kept_bytes: int
    zeroed_bytes: int


def fatbin_section(data: bytes | bytearray) -> tuple[int, int]:
    """(offset, size) of `.nv_fatbin` in an ELF64 file; (0, 0) when it has none."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise Damaged("shared library", "(file)", "not an ELF64 file", "prune only .so files of x86_64/aarch64 wheels")
    table_at = struct.unpack_from("<Q", data, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)

    def header(index: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, table_at + index * entry_size)
        return name, offset, size

    names_at = header(names_index)[1]
    for index in range(count):
        name, offset, size = header(index)
        end = data.index(b"\0", names_at + name)
        if bytes(data[names_at + name:end]) == b".nv_fatbin":
            return offset, size
    return 0, 0


def images(data: bytes | bytearray) -> list[Image]:
    """Every image of every fatbin container in the section, in file order."""
    start, size = fatbin_section(data)
    found: list[Image] = []
    at = start
    while at + 16 <= start + size:
        magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", data, at)
        if magic != MAGIC:
            at += 8  # containers are 8-byte aligned; padding between them
            continue
        entry, end = at + header_size, at + header_size + body_size
        while entry < end:
            kind, _flags, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            if entry_header < 32 or entry + entry_header + payload > end:
                raise Damaged("shared library", ".nv_fatbin", f"an image at {entry:#x} has a header or size that does not fit",
                              "leave this library out of pruning (its fatbin layout is not the one rig reads)")
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            found.append(Image(kind, arch, entry + entry_header, payload))
            entry += entry_header + payload
        if entry != end:
            raise Damaged("shared library", ".nv_fatbin", f"a container at {at:#x} does not end where its header says",
                          "leave this library out of pruning (its fatbin layout is not the one rig reads)")
        at = end
    return found


def keeps(image: Image, arch: int) -> bool:
    if image.kind == ELF:
        return image.arch == arch
    if image.kind == PTX:
        return image.arch <= arch
    return True


def prune(data: bytearray, arch: int) -> Pruned:
    """Zero, in place, the payloads `keeps` says no to."""
    found = images(data)
    kept = zeroed = 0
    for image in found:
        if keeps(image, arch):
            kept += image.payload_size
        else:
            data[image.payload_at:image.payload_at + image.payload_size] = bytes(image.payload_size)
            zeroed += image.payload_size
    return Pruned(len(found), kept, zeroed)
