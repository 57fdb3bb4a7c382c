"""Reading the files a workload names (scenarios, traces, conversation files, peer results) as
user input: regular files only, size-capped before reading, UTF-8, YAML through the strict loader
(rig/strict_yaml.py), JSON with duplicate keys and NaN/Infinity refused, every row through a
strict pydantic model, every failure one RigError line (file, field, fix)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rig import strict_yaml
from rig.errors import Invalid, RigError
from rig.strict_yaml import strict_json
from rig.typed import first_problem

MAX_DATA_BYTES = 64 << 20  # a trace or conversation file; the shipped ones are a few kB
MAX_ROWS = 100_000
Row = TypeVar("Row", bound=BaseModel)


def display(path: Path) -> str:
    from rig.paths import REPO_ROOT

    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except (ValueError, OSError):
        return str(path)


def read_regular(path: Path, where: str, cap: int, fix: str) -> bytes:
    """The bytes of a regular file of at most `cap` bytes (a FIFO or /dev/zero is never read):
    rig.strict_yaml.read_regular, with this file's fix for a missing one."""
    return strict_yaml.read_regular(path, cap, where, missing=("no such file", fix))


def read_yaml(path: Path, where: str, fix: str) -> Any:
    """A YAML document through the strict loader; syntax errors are one line with their line number."""
    return strict_yaml.load_yaml_file(path, 1 << 20, where, missing=("no such file", fix),
                                      fix="write plain UTF-8 YAML, each key once, like loadtests/scenarios/*.yaml")


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise RigError(where, f"line {line}", f"not UTF-8 (byte 0x{data[error.start]:02x})", "save the file as UTF-8") from None


# Control characters (newline, tab and carriage return excepted: conversation text has lines),
# line/paragraph separators and bidirectional overrides (grammar.control_character's set).
_HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


_NON_BLANK_LINE = re.compile(r"^\s*?\S", re.MULTILINE)  # what line.strip() keeps


def _hidden_character(value: Any) -> str | None:
    """The first hidden character in any of a row's strings (keys included), escaped."""
    if isinstance(value, str):
        found = _HIDDEN.search(value)
        return repr(found.group(0))[1:-1] if found else None
    if isinstance(value, dict):
        return next((hit for key, item in value.items() for hit in (_hidden_character(key), _hidden_character(item)) if hit), None)
    if isinstance(value, list):
        return next((hit for item in value if (hit := _hidden_character(item))), None)
    return None



def read_rows(path: Path, where: str, model: type[Row], fix: str, max_rows: int = MAX_ROWS,
              unwrap: Callable[[Any], list[Any]] | None = None) -> list[Row]:
    """Rows of a JSON Lines file (or, with `unwrap`, of one JSON document), each validated by
    `model`. Blank lines are skipped; anything else that is not a valid row is refused."""
    text = _decode(read_regular(path, where, MAX_DATA_BYTES, fix), where)
    if unwrap is not None:
        try:
            items = unwrap(strict_json(text))
        except ValueError as error:
            raise RigError(where, "(file)", f"not valid JSON ({error})", fix) from None
        numbered = list(enumerate(items, start=1))
        label = "item"
    else:
        # Counted before anything is parsed or split: ten million short lines are refused in seconds.
        if text.count("\n") > max_rows and sum(1 for _ in _NON_BLANK_LINE.finditer(text)) > max_rows:
            raise RigError(where, "(file)", f"more than {max_rows} rows", "cut the file down")
        numbered = []
        for number, line in enumerate(text.split("\n"), start=1):  # JSON Lines ends lines with \n (or \r\n) only
            if not line.strip():
                continue
            try:
                numbered.append((number, strict_json(line)))
            except ValueError as error:
                raise RigError(where, f"line {number}", f"not valid JSON ({error})", fix) from None
        label = "line"
    if len(numbered) > max_rows:
        raise RigError(where, "(file)", f"{len(numbered)} rows is more than {max_rows}", "cut the file down")
    if not numbered:
        raise RigError(where, "(file)", "holds no rows", fix)
    rows = []
    for number, item in numbered:
        bad = _hidden_character(item)
        if bad:
            raise RigError(where, f"{label} {number}", f"contains the control character {bad}", "remove it")
        try:
            rows.append(model.model_validate(item))
        except ValidationError as error:
            field, message = first_problem(error)
            raise Invalid(where, f"{label} {number}: {field}", message, fix) from None
    return rows
