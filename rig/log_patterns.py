"""Boot-log patterns: the regexes a recipe's boot_log must/forbid lists hold, checked and compiled
with RE2 (google-re2), the linear-time engine the boot checks scan whole server logs with."""

from __future__ import annotations

import functools
import re
from typing import Any

# Boot checks scan whole server logs with these. They compile with RE2 (google-re2), which
# matches in time linear in the log: no pattern backtracks, whatever its shape. What is left to
# bound is the compiled program (stacked `.{0,999}` multiply it), its memory, and the length.
REGEX_MAX_LENGTH = 200
REGEX_MAX_PROGRAM = 2000  # RE2 instructions; `.{0,100}` is about 900, `\p{L}` 1,200, `.{0,999}` 9,000
REGEX_MAX_MEMORY = 8 << 20


def _re2_options() -> Any:
    import re2

    options = re2.Options()
    options.max_mem = REGEX_MAX_MEMORY
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    return options


def _inline_global_flags(pattern: str) -> str | None:
    """The first `(?flags)` group (flags for the rest of the pattern, not a scoped `(?i:...)`)."""
    index, length, in_class = 0, len(pattern), False
    while index < length:
        char = pattern[index]
        if pattern.startswith("\\Q", index):  # RE2's literal text, up to \E
            end = pattern.find("\\E", index + 2)
            index = length if end < 0 else end + 2
            continue
        if char == "\\":
            index += 2
            continue
        if in_class:
            if pattern.startswith("[:", index):
                end = pattern.find(":]", index + 2)
                index = index + 1 if end < 0 else end + 2
                continue
            in_class = char != "]"
            index += 1
            continue
        if char == "[":
            index += 1 + pattern.startswith("^", index + 1)
            index += pattern.startswith("]", index)  # a ] first in a class is literal
            in_class = True
            continue
        flags = re.match(r"\(\?[A-Za-z-]*\)", pattern[index:])
        if flags:
            return flags.group(0)
        index += 1
    return None


def safe_regex(pattern: str) -> str:
    """A boot-log pattern RE2 compiles, short, with a bounded program and no global inline flags
    (they would change how rig's own wrapping matches, and Python's `re` rejects them mid-pattern)."""
    import re2

    if len(pattern) > REGEX_MAX_LENGTH:
        raise ValueError(f"regex of {len(pattern)} characters is longer than {REGEX_MAX_LENGTH}")
    flags = _inline_global_flags(pattern)
    if flags:
        raise ValueError(f"regex {pattern!r}: the inline flag group {flags} applies to the whole pattern; "
                         f"scope it, e.g. (?i:text)")
    if "\\C" in pattern.replace("\\\\", ""):
        raise ValueError(f"regex {pattern!r}: \\C matches single bytes inside characters; use .")
    try:
        compiled = re2.compile(pattern, _re2_options())
    except re2.error as error:
        reason = error.args[0].decode(errors="replace") if error.args and isinstance(error.args[0], bytes) else str(error)
        raise ValueError(f"regex {pattern!r} does not compile with RE2, the linear-time engine boot checks use: {reason}") from None
    if compiled.programsize > REGEX_MAX_PROGRAM:
        raise ValueError(f"regex {pattern!r} compiles to {compiled.programsize} RE2 instructions, more than "
                         f"{REGEX_MAX_PROGRAM} (large bounded repeats like .{{0,999}} multiply it)")
    return pattern


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str, multiline: bool = False) -> Any:
    """A checked pattern compiled with RE2 (multiline: ^ and $ match at every line)."""
    import re2

    return re2.compile(("(?m)" if multiline else "") + f"(?:{safe_regex(pattern)})", _re2_options())
