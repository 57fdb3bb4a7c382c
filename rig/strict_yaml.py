"""A YAML reader for user-written files: duplicate keys, aliases, deep nesting, non-UTF-8 bytes
and oversized files are refused with a one-line reason instead of a silent last-wins or a
traceback."""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 32
MAX_BYTES = 1 << 20  # a recipe is a few kB; anything near a MiB is not one


class YamlRefused(ValueError):
    """Why the text was refused, and on which line (1-based, or None)."""

    def __init__(self, problem: str, line: int | None = None) -> None:
        self.problem, self.line = problem, line
        super().__init__(problem)


class StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML 1.2 says they are an error; PyYAML
    keeps the last), aliases (nothing in a recipe needs them and they multiply work) and
    nesting deeper than MAX_DEPTH (PyYAML recurses once per level)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlRefused("YAML aliases (*name) are not supported here; write the value out", event.start_mark.line + 1)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()
                raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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


def load_strict(data: bytes) -> Any:
    """Parse UTF-8 YAML bytes strictly; YamlRefused or yaml.YAMLError on bad input."""
    if len(data) > MAX_BYTES:
        raise YamlRefused(f"{len(data)} bytes is larger than any recipe ({MAX_BYTES} at most)")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlRefused("the file is UTF-16; save it as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise YamlRefused(f"not UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start})", line) from None
    return yaml.load(text, Loader=StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
