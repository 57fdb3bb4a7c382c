"""The one reader for every file rig reads from a user or from an earlier run (recipes, scenarios,
state, plans, prompts): only regular files, read with a size cap, and YAML parsed strictly.

Strict means: duplicate keys, aliases, merge keys, tags, deep nesting, huge documents, non-UTF-8
bytes, control and invisible format characters, and plain scalars that YAML 1.1 (PyYAML) and
YAML 1.2 readers disagree on (`017620`, `yes`, `1:20`, `2024-01-01`, `1e3`) are refused with a
one-line reason instead of a silent guess or a traceback.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from rig.errors import Damaged, NotFound
from rig.grammar import find_control_characters

MAX_DEPTH = 32
MAX_BYTES = 1 << 20  # the default cap; each caller passes its own (a recipe is a few kB)
MAX_NODES = 20_000  # scalars + collections in one document: a recipe has a few hundred
MAX_SCALAR = 16_384  # characters in one value or key

class YamlRefused(ValueError):
    """Why the text was refused, and where: a line (1-based) or a dotted field, or neither."""

    def __init__(self, problem: str, line: int | None = None, field: str | None = None, fix: str | None = None) -> None:
        self.problem, self.line, self.field, self.fix = problem, line, field, fix
        super().__init__(problem)

    @property
    def where(self) -> str:
        return self.field or (f"line {self.line}" if self.line else "(file)")


# ---- YAML 1.2 core schema (the spec's section 10.3.2, tag resolution) ----------------------------
_CORE_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_CORE_INT = re.compile(r"[-+]?[0-9]+")
_CORE_OCT = re.compile(r"0o[0-7]+")
_CORE_HEX = re.compile(r"0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_CORE_INF = re.compile(r"[-+]?\.(?:inf|Inf|INF)")
_CORE_NAN = re.compile(r"\.(?:nan|NaN|NAN)")
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"


def core_schema_value(text: str) -> Any:
    """What a YAML 1.2 reader (core schema) makes of a plain scalar."""
    if text in ("~", "null", "Null", "NULL", ""):
        return None
    if text in _CORE_BOOL:
        return _CORE_BOOL[text]
    if _CORE_INT.fullmatch(text):
        return int(text, 10)
    if _CORE_OCT.fullmatch(text):
        return int(text[2:], 8)
    if _CORE_HEX.fullmatch(text):
        return int(text[2:], 16)
    if _CORE_FLOAT.fullmatch(text):
        return float(text)
    if _CORE_INF.fullmatch(text):
        return -math.inf if text.startswith("-") else math.inf
    if _CORE_NAN.fullmatch(text):
        return math.nan
    return text


def _same(ours: Any, core: Any) -> bool:
    if type(ours) is not type(core):
        return False
    if isinstance(ours, float) and math.isnan(ours):
        return math.isnan(core)
    return bool(ours == core)


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "text", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}")


class StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML 1.2 says they are an error; PyYAML
    keeps the last), aliases (nothing rig reads needs them and they multiply work), tags, merge
    keys, nesting deeper than MAX_DEPTH (PyYAML recurses once per level), more than MAX_NODES
    nodes, and plain scalars whose meaning depends on the YAML version."""

    _depth = 0
    _nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise YamlRefused("YAML aliases (*name) are not supported here; write the value out", line)
        if getattr(event, "tag", None) is not None:
            raise YamlRefused(f"YAML tags ({event.tag.replace('tag:yaml.org,2002:', '!!')}) are not supported here; write a plain value (quote text)", line)
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_SCALAR:
            raise YamlRefused(f"a value of {len(event.value)} characters is longer than {MAX_SCALAR}", line,
                              fix="shorten it; no value rig reads is that long")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlRefused(f"more than {MAX_NODES} values in one document", line, fix="split or shorten the file")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels", line)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        plain = isinstance(node, yaml.ScalarNode) and node.style is None
        line = node.start_mark.line + 1
        if plain and node.tag == _MERGE:
            raise YamlRefused("merge keys (<<) exist only in YAML 1.1; write the keys out", line)
        if plain and node.tag == _VALUE:
            raise YamlRefused("a bare '=' is a YAML 1.1 value key; quote it", line)
        value = super().construct_object(node, deep=deep)
        if plain:
            core = core_schema_value(node.value)
            if not _same(value, core):
                raise YamlRefused(
                    f"{node.value!r} is {_kind(value)} ({value!r}) to YAML 1.1 readers and {_kind(core)} ({core!r}) to "
                    "YAML 1.2 readers; quote it if it is text, or write the value unambiguously", line)
        return value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise YamlRefused("a mapping key must be a plain value", key_node.start_mark.line + 1) from None
            if key in seen:
                raise YamlRefused(f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark.line + 1)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


StrictSafeLoader.add_constructor("tag:yaml.org,2002:map", StrictSafeLoader.construct_yaml_map)


def decode_text(data: bytes, max_bytes: int = MAX_BYTES) -> str:
    """The bytes as UTF-8 text, at most max_bytes of them; YamlRefused otherwise."""
    if len(data) > max_bytes:
        raise YamlRefused(f"{len(data)} bytes is larger than this file may be ({max_bytes} at most)")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlRefused("the file is UTF-16; save it as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise YamlRefused(f"not UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start})", line) from None
    return text


def load_strict(data: bytes, max_bytes: int = MAX_BYTES) -> Any:
    """Parse UTF-8 YAML bytes strictly; YamlRefused or yaml.YAMLError on bad input. No key or
    value may hold a control or invisible format character (a zero-width space makes a name or a
    pattern silently differ from what it shows; a newline injects lines into rendered files)."""
    document = yaml.load(decode_text(data, max_bytes), Loader=StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    found = find_control_characters(document)
    if found:
        field, char = found
        raise YamlRefused(f"contains the control or invisible character {char} (it could inject lines into rendered "
                          "files or hide text)", field=field, fix="remove it; write multi-word values on one line")
    return document


# ---- files -----------------------------------------------------------------------------------


def read_regular(path: Path, max_bytes: int, where: str | None = None,
                 missing: tuple[str, str] = ("no such file", "check the path")) -> bytes:
    """The bytes of a regular file of at most `max_bytes`: a directory, device, pipe or socket (or
    a link to one: /dev/zero reads forever) and anything larger is one RigError line, before
    reading more than max_bytes + 1 bytes. `missing` is (problem, fix) for a file that is not there."""
    where = where or str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it changes nothing for a regular file.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise NotFound(where, "(file)", *missing) from None
    except PermissionError:
        raise Damaged(where, "(file)", "cannot be read (permission denied)", "make it readable by this user") from None
    except OSError as error:
        problem = "the name is too long" if error.errno == errno.ENAMETOOLONG else f"cannot be read ({error.strerror})"
        raise Damaged(where, "(file)", problem, "pass a regular file") from None
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise Damaged(where, "(file)", "is a directory, not a file", f"pass a file; {missing[1]}")
        if not stat.S_ISREG(info.st_mode):
            raise Damaged(where, "(file)", "is not a regular file (a device, pipe or socket)", "pass a regular file")
        if info.st_size > max_bytes:
            raise Damaged(where, "(file)", f"{info.st_size} bytes is larger than this file may be ({max_bytes} at most)",
                           "pass the right file; nothing rig reads is that large")
        chunks, total = [], 0
        while total <= max_bytes:
            # Asked for what the file holds (and one byte more, to see it end), never the whole cap: a
            # read allocates all it asks for, and a 1 GiB cap would take 1 GiB for a file of a few kB.
            chunk = os.read(descriptor, min(max_bytes + 1 - total, max(info.st_size + 1 - total, 1 << 16)))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as error:
        raise Damaged(where, "(file)", f"cannot be read ({error.strerror})", "pass a regular file") from None
    finally:
        os.close(descriptor)
    if total > max_bytes:  # it grew while being read
        raise Damaged(where, "(file)", f"larger than this file may be ({max_bytes} bytes at most)", "pass the right file")
    return b"".join(chunks)


def open_inside(path: Path, root: Path, where: str | None = None) -> int:
    """A descriptor of `path`, a regular file that lies inside `root` once links are resolved (a log
    linked to /etc/shadow, a FIFO or /dev/zero in its place are refused): NotFound or Damaged."""
    where = where or str(path)
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise NotFound(where, "(file)", "no such file", "check the path") from None
    except (OSError, RuntimeError) as error:
        raise Damaged(where, "(file)", f"cannot be resolved ({error})", "pass a regular file") from None
    if not real.is_relative_to(root.resolve()):
        raise Damaged(where, "(file)", f"leads outside {root} (to {real})", "rig reads only files of its own results")
    descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise Damaged(where, "(file)", "is not a regular file (a device, pipe or socket)", "rig reads only regular files")
    return descriptor


def read_inside(path: Path, root: Path, max_bytes: int) -> bytes:
    """open_inside(), then at most max_bytes of it (read_regular's rules)."""
    descriptor = open_inside(path, root)
    os.close(descriptor)
    return read_regular(path.resolve(), max_bytes, str(path))


def load_yaml_file(path: Path, max_bytes: int = MAX_BYTES, where: str | None = None,
                   missing: tuple[str, str] = ("no such file", "check the path"),
                   fix: str = "write it as plain UTF-8 YAML, each key once") -> Any:
    """Read `path` (regular file, size cap) and parse it strictly; every failure is one RigError line."""
    where = where or str(path)
    data = read_regular(path, max_bytes, where, missing)
    try:
        return load_strict(data, max_bytes)
    except YamlRefused as error:
        raise Damaged(where, error.where, error.problem, error.fix or fix) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise Damaged(where, f"line {mark.line + 1}" if mark else "(file)", f"not valid YAML ({problem})",
                       "fix the YAML syntax") from None
    except RecursionError:
        raise Damaged(where, "(file)", f"nested deeper than {MAX_DEPTH} levels", fix) from None


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def strict_json(text: str | bytes) -> Any:
    """json.loads that refuses duplicate keys (last-wins elsewhere), NaN/Infinity (not JSON; a NaN
    figure or timestamp poisons every mean and comparison it enters) and nesting too deep to read.
    ValueError for all of them."""
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deep") from None


def load_json_file(path: Path, max_bytes: int = MAX_BYTES, where: str | None = None,
                   missing: tuple[str, str] = ("no such file", "check the path"),
                   fix: str = "this file was written by rig; restore it or start again") -> Any:
    """A JSON file rig wrote earlier (state, plans, entries), read with the same guards."""
    where = where or str(path)
    data = read_regular(path, max_bytes, where, missing)
    try:
        return strict_json(decode_text(data, max_bytes))
    except YamlRefused as error:
        raise Damaged(where, error.where, error.problem, fix) from None
    except (ValueError, RecursionError) as error:
        raise Damaged(where, "(file)", f"not valid JSON ({' '.join(str(error).split())})", fix) from None
