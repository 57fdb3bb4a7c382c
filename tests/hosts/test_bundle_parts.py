"""What a bundle is made of, proven without a network: a wheel rewritten without some files
(its RECORD still true, the same bytes every time), GPU code pruned to one architecture in a
synthetic ELF, the lock read from uv's output and the selection of what travels, the spec and
profile read strictly, and part sizes."""

from __future__ import annotations

import csv
import io
import struct
import zipfile
from pathlib import Path

import pytest
from synthetic_bundles import make_wheel

from rig.errors import Damaged, Invalid, NotFound
from rig.hosts import fatbin, lock, parts, spec, wheels


def _record(path: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("RECORD"))
        rows = list(csv.reader(io.StringIO(archive.read(name).decode())))
        return {row[0]: row for row in rows if row} | {"": archive.namelist()}


def test_a_wheel_without_some_files_keeps_a_true_record_and_the_same_bytes_each_time(tmp_path):
    source = make_wheel(tmp_path / "in", "eng", "1.0", {"eng/a.py": b"a = 1\n", "eng/kernels.so": b"\x7fELF" + b"k" * 100,
                                                          "eng/b.py": b"b = 2\n"})
    first, second = tmp_path / "one" / source.name, tmp_path / "two" / source.name
    for out in (first, second):
        out.parent.mkdir()
        assert wheels.without(source, ["eng/*.so"], out) == ["eng/kernels.so"]
    assert first.read_bytes() == second.read_bytes()
    record = _record(first)
    assert "eng/kernels.so" not in record and "eng/kernels.so" not in record[""]
    with zipfile.ZipFile(first) as archive:
        for path in ("eng/a.py", "eng/b.py"):
            assert record[path][1] == wheels.record_hash(archive.read(path))


def test_a_transformed_entry_gets_its_new_hash_and_size_in_the_record(tmp_path):
    source = make_wheel(tmp_path / "in", "eng", "1.0", {"eng/k.so": b"abc" * 10})
    out = tmp_path / "out" / source.name
    out.parent.mkdir()
    wheels.without(source, [], out, lambda name, data: b"zzz" if name == "eng/k.so" else None)
    row = _record(out)["eng/k.so"]
    assert row[1:] == [wheels.record_hash(b"zzz"), "3"]


def _elf_with_fatbin(images: list[tuple[int, int, bytes]], corrupt: bool = False) -> bytearray:
    """An ELF64 with two sections, the null one and .nv_fatbin, holding one container of `images`
    (kind, arch, payload); the layout fatbin.py reads."""
    body = b""
    for kind, arch, payload in images:
        header = struct.pack("<HHIQ", kind, 0, 64, len(payload)) + bytes(12) + struct.pack("<I", arch) + bytes(32)
        body += header + payload
    container = struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body) + (8 if corrupt else 0)) + body
    names = b"\0.nv_fatbin\0"
    data_at = 64
    names_at = data_at + len(container)
    table_at = names_at + len(names)
    elf = bytearray(b"\x7fELF\x02\x01\x01" + bytes(9))
    elf += bytes(64 - len(elf))
    struct.pack_into("<Q", elf, 0x28, table_at)
    struct.pack_into("<HHH", elf, 0x3A, 64, 3, 2)
    elf += container + names
    elf += bytes(64)  # section 0: null
    elf += struct.pack("<IIQQQQ", 1, 1, 0, 0, data_at, len(container)) + bytes(24)  # .nv_fatbin
    elf += struct.pack("<IIQQQQ", 0, 3, 0, 0, names_at, len(names)) + bytes(24)  # section names
    return elf


def test_gpu_code_for_other_architectures_becomes_zeros_and_every_header_stays():
    images = [(2, 80, b"A" * 40), (2, 90, b"B" * 40), (1, 90, b"C" * 40), (1, 100, b"D" * 40), (2, 120, b"E" * 40)]
    elf = _elf_with_fatbin(images)
    before = fatbin.images(elf)
    result = fatbin.prune(elf, 90)
    assert (result.images, result.kept_bytes, result.zeroed_bytes) == (5, 80, 120)
    after = fatbin.images(elf)
    assert [(i.kind, i.arch, i.payload_at, i.payload_size) for i in after] == [
        (i.kind, i.arch, i.payload_at, i.payload_size) for i in before]
    payloads = {(i.kind, i.arch): bytes(elf[i.payload_at:i.payload_at + i.payload_size]) for i in after}
    assert payloads[(2, 90)] == b"B" * 40 and payloads[(1, 90)] == b"C" * 40
    assert payloads[(2, 80)] == payloads[(1, 100)] == payloads[(2, 120)] == bytes(40)


def test_a_fatbin_whose_sizes_do_not_add_up_is_refused():
    with pytest.raises(Damaged, match="does not fit|does not end where"):
        fatbin.images(_elf_with_fatbin([(2, 90, b"B" * 40)], corrupt=True))
    with pytest.raises(Damaged, match="not an ELF64 file"):
        fatbin.images(b"not an elf at all")


LOCK = """engine==1.0 \\
    --hash=sha256:""" + "a" * 64 + """
    # via -r requirements.in
tracing==2.0 \\
    --hash=sha256:""" + "b" * 64 + """
    # via engine
tracing-proto==2.0 \\
    --hash=sha256:""" + "c" * 64 + """
    # via tracing
shared==3.0 \\
    --hash=sha256:""" + "d" * 64 + """
    # via
    #   engine
    #   tracing
torch==2.11.0 \\
    --hash=sha256:""" + "e" * 64 + """
    # via engine
"""


def _spec(**fields) -> spec.BundleSpec:
    return spec.BundleSpec.model_validate({"name": "engine-1.0", "requirements": ["engine==1.0"]} | fields)


def _profile(**provides) -> spec.HostProfile:
    return spec.HostProfile.model_validate({"name": "host", "python": "3.12", "platform": "x86_64-manylinux_2_28",
                                            "provides": provides})


def test_what_travels_is_the_lock_less_the_host_less_what_is_left_out_and_what_only_that_needs():
    entries = lock.parse_lock(LOCK)
    assert entries["shared"].via == {"engine", "tracing"} and entries["engine"].hashes == ["a" * 64]
    chosen = lock.select(entries, _spec(leave_out_packages={"tracing": "request tracing only"}), _profile(torch="2.11.0"))
    assert [e.name for e in chosen.carried] == ["engine", "shared"]
    assert chosen.provided == {"torch": "2.11.0"}
    assert chosen.left_out == {"tracing": "request tracing only", "tracing-proto": "only needed by tracing"}
    assert "--hash=sha256:" + "a" * 64 in lock.requirements_text(chosen.carried)


def test_a_left_out_package_the_engine_does_not_require_is_refused():
    with pytest.raises(Invalid, match="not among the resolved packages"):
        lock.select(lock.parse_lock(LOCK), _spec(leave_out_packages={"nothing": "x"}), _profile())


@pytest.mark.parametrize(("fields", "problem"), [
    ({"requirements": ["engine>=1.0"]}, "is not pinned"),
    ({"exclude_newer": "2026-07-01"}, "is not a UTC time"),
    ({"overrides": {"llguidance": "why"}}, "is not name==version"),
])
def test_a_spec_that_does_not_pin_one_exact_build_is_refused_in_one_line(tmp_path, fields, problem):
    path = tmp_path / "bad.yaml"
    import yaml
    path.write_text(yaml.safe_dump({"name": "bad", "requirements": ["engine==1.0"]} | fields))
    with pytest.raises(Invalid, match=problem) as refused:
        spec.read_spec(str(path))
    assert "\n" not in str(refused.value) and str(path) in str(refused.value)


def test_an_unknown_spec_name_lists_the_known_ones_and_a_bad_profile_is_refused(tmp_path):
    with pytest.raises(NotFound, match="vllm-0.24.0"):
        spec.read_spec("no-such-spec")
    with pytest.raises(ValueError, match="sm_NN"):
        spec.HostProfile.model_validate({"name": "h", "python": "3.12", "platform": "x86_64-manylinux_2_28",
                                         "provides": {}, "gpu_arch": "hopper"})
    assert spec.read_profile("h200-py312-torch211").arch_number() == 90


def test_the_shipped_spec_and_profile_read():
    shipped = spec.read_spec("vllm-0.24.0")
    assert shipped.requirements == ["vllm==0.24.0"] and "flashinfer-python" in shipped.leave_out_packages
    assert spec.read_profile("h200-py312-torch211").torch_pin() == "torch==2.11.0"


@pytest.mark.parametrize("text", ["0MiB", "12", "5TiB", "1KiB", "60 MB"])
def test_a_part_size_outside_1mib_to_4gib_or_without_its_unit_is_refused(text):
    with pytest.raises(Invalid, match="--part-size"):
        parts.part_size(text)


def test_parts_cut_a_file_into_pieces_of_at_most_the_size_in_order(tmp_path):
    source = tmp_path / "blob"
    source.write_bytes(bytes(range(256)) * 41)
    cut = parts.cut(source, tmp_path / "out", 4096, "blob")
    assert [p.parent.name for p in cut] == ["part-01", "part-02", "part-03"]
    assert b"".join(p.read_bytes() for p in cut) == source.read_bytes()
    assert parts.part_size("60MiB") == 60 << 20
