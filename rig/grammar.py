"""The real grammars of recipe values that end up in rendered files or on a command line.

Each check returns the value or raises ValueError with the reason (pydantic turns that into
the one-line RigError). Sources: distribution/reference (image names), RFC 3986 (URL paths),
PEP 508/440 (pip pins), docker/go-units (sizes)."""

from __future__ import annotations

import ipaddress
import re
import re._constants as sre_constants  # the opcodes `re` itself compiles to
import re._parser as sre_parse
import unicodedata
from typing import Any

# distribution/reference/regexp.go
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
REPOSITORY = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
NAME_TOTAL_LENGTH_MAX = 255

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RECIPE_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
# An absolute POSIX path of plain components: no '..', no ':' (a compose volume separator), no spaces.
_PATH_PART = r"[A-Za-z0-9_@+][A-Za-z0-9._@+-]*|\.[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*"
ABSOLUTE_PATH = re.compile(rf"(?:/(?:{_PATH_PART}))+/?")
# RFC 3986 path-absolute: "/" followed by pchar segments; "//" would start an authority (another
# host). "$" is left out: compose would interpolate it in the rendered healthcheck.
URL_PATH = re.compile(r"/(?:[A-Za-z0-9._~!&'()*+,;=:@-]|%[0-9A-Fa-f]{2})+(?:/(?:[A-Za-z0-9._~!&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*|/")
# docker/go-units RAMInBytes, without the optional space (a compose value, kept unambiguous).
DOCKER_SIZE = re.compile(r"[0-9]+(?:\.[0-9]+)?[kKmMgGtTpP]?[iI]?[bB]?")
# A hub id or local name: org/name, letters, digits and ._- only.
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*")
PLAIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+-]*")

# Bidirectional overrides reorder what a reviewer sees; line/paragraph separators break lines.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def control_character(text: str) -> str | None:
    """The first control character in `text` (as an escape), or None."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in _BIDI:
            return repr(char)[1:-1]
    return None


def find_control_characters(value: Any, path: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """(dotted field, escaped char) for the first string (key or value) holding a control character."""
    if isinstance(value, str):
        found = control_character(value)
        return (".".join(path) or "(top level)", found) if found else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (found := control_character(key)):
                return ".".join((*path, repr(key)[1:-1])), found
            hit = find_control_characters(item, (*path, str(key)))
            if hit:
                return hit
    if isinstance(value, list):
        for index, item in enumerate(value):
            hit = find_control_characters(item, (*path, str(index)))
            if hit:
                return hit
    return None


def _full(pattern: re.Pattern[str], value: str) -> bool:
    return pattern.fullmatch(value) is not None


def repository(value: str) -> str:
    if len(value) > NAME_TOTAL_LENGTH_MAX or not _full(REPOSITORY, value):
        raise ValueError(f"{value!r} is not an image repository (lowercase name[/path], optional registry host, "
                         "as in distribution/reference)")
    return value


def tag(value: str) -> str:
    if not _full(TAG, value):
        raise ValueError(f"{value!r} is not an image tag (letters, digits, _ . -, at most 128, not starting with . or -)")
    return value


def env_key(value: str) -> str:
    if not _full(ENV_KEY, value):
        raise ValueError(f"{value!r} is not an environment variable name (letters, digits, _; not starting with a digit)")
    return value


def variant_key(value: str) -> str:
    if not _full(RECIPE_NAME, value):
        raise ValueError(f"variant name {value!r} must look like a recipe name: lowercase letters, digits and -")
    return value


def absolute_path(value: str) -> str:
    if not _full(ABSOLUTE_PATH, value) or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r} is not a plain absolute path (/dir/name: letters, digits, . _ @ + -, no '..')")
    return value


def url_path(value: str) -> str:
    if value.startswith("//") or not _full(URL_PATH, value):
        raise ValueError(f"{value!r} is not an absolute URL path on the server (like /health; no scheme, host or query)")
    return value


def ip_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (like 127.0.0.1 or 0.0.0.0)") from None
    return value


def docker_size(value: str) -> str:
    if not _full(DOCKER_SIZE, value) or float(re.match(r"[0-9.]+", value).group(0)) <= 0:  # type: ignore[union-attr]
        raise ValueError(f"{value!r} is not a Docker size (like 32gb, 512m, 1g)")
    return value


def data_name(value: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", value):
        raise ValueError(f"{value!r} is not a data file name (lowercase letters, digits, . _ -)")
    return value


def model_id(value: str) -> str:
    if not _full(MODEL_ID, value):
        raise ValueError(f"{value!r} is not a model id (org/name: letters, digits, . _ -)")
    return value


def plain_word(value: str) -> str:
    if not _full(PLAIN_WORD, value):
        raise ValueError(f"{value!r} must be a plain word (letters, digits, . _ / + -)")
    return value


def exact_pin(value: str) -> str:
    """`name[extras]==version`: a PEP 508 name with an exact PEP 440 pin, nothing else."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    problem = f"{value!r} is not an exact pin name==version (PEP 508 name, optional [extras], a PEP 440 version)"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.+!_-]+", value):
        raise ValueError(problem)
    try:
        requirement = Requirement(value)
        (specifier,) = requirement.specifier
        Version(specifier.version)
    except (InvalidRequirement, InvalidVersion, ValueError):
        raise ValueError(problem) from None
    if requirement.url or requirement.marker or specifier.operator != "==" or "*" in specifier.version:
        raise ValueError(problem)
    return value


def release_version(value: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a PEP 440 release version (like 0.5.23)") from None
    if not re.fullmatch(r"[0-9A-Za-z.+!-]+", value):
        raise ValueError(f"{value!r} is not a PEP 440 release version (like 0.5.23)")
    return value


# Boot-log patterns run with Python's `re`, which has no timeout (checks.py scans every log line
# with them). Rather than adding a regex engine with timeouts, patterns are kept to a shape that
# cannot backtrack catastrophically: short, no quantifier over a group that itself repeats or
# alternates (the (a+)+ / (a|a)* families, exponential), and few unbounded quantifiers (each
# adds a polynomial factor on a long line; checks.py wraps forbid patterns in ^.*(...).*$).
REGEX_MAX_LENGTH = 200
REGEX_MAX_UNBOUNDED = 2


def _walk(parsed: Any) -> list[tuple[Any, Any]]:
    return list(parsed.data if hasattr(parsed, "data") else parsed)


def _repeats_inside(items: list[tuple[Any, Any]]) -> bool:
    for op, arg in items:
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT) and arg[1] > 1:
            return True
        if op is sre_constants.BRANCH:
            return True
        if _children_repeat(op, arg):
            return True
    return False


def _children(op: Any, arg: Any) -> list[list[tuple[Any, Any]]]:
    if op is sre_constants.SUBPATTERN:
        return [_walk(arg[-1])]
    if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
        return [_walk(arg[2])]
    if op is sre_constants.BRANCH:
        return [_walk(branch) for branch in arg[1]]
    if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
        return [_walk(arg[1])]
    if op is sre_constants.ATOMIC_GROUP:
        return [_walk(arg)]
    if op is sre_constants.GROUPREF_EXISTS:
        return [_walk(b) for b in arg[1:] if b is not None]
    return []


def _children_repeat(op: Any, arg: Any) -> bool:
    return any(_repeats_inside(child) for child in _children(op, arg))


def _audit(items: list[tuple[Any, Any]], counts: list[int]) -> str | None:
    for op, arg in items:
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            low, high, body = arg
            if high is sre_constants.MAXREPEAT or high > 1000:
                counts[0] += 1
            if high > 1 and _repeats_inside(_walk(body)):
                return "a quantifier over a group that itself repeats or alternates (like (a+)+ or (a|b)*) can backtrack exponentially"
        if op is sre_constants.GROUPREF:
            return "backreferences are not supported in boot-log patterns"
        for child in _children(op, arg):
            found = _audit(child, counts)
            if found:
                return found
    return None


def safe_regex(pattern: str) -> str:
    if len(pattern) > REGEX_MAX_LENGTH:
        raise ValueError(f"regex of {len(pattern)} characters is longer than {REGEX_MAX_LENGTH}")
    try:
        re.compile(pattern)
        parsed = sre_parse.parse(pattern)
    except re.error as error:
        raise ValueError(f"regex {pattern!r} does not compile: {error}") from None
    counts = [0]
    problem = _audit(_walk(parsed), counts)
    if problem is None and counts[0] > REGEX_MAX_UNBOUNDED:
        problem = f"more than {REGEX_MAX_UNBOUNDED} unbounded quantifiers (* + {{n,}}) make a long log line slow to scan"
    if problem:
        raise ValueError(f"regex {pattern!r}: {problem}")
    return pattern


# Load-test names (scenarios, prompt sets, traces, conversation files) become directory and file
# names under results/ and loadtests/: one plain word, so no name can walk out of its directory.
LOAD_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


def load_name(value: str) -> str:
    if not _full(LOAD_NAME, value):
        raise ValueError(f"{value!r} is not a load-test name (lowercase letters, digits and -, at most 64, "
                         "starting with a letter or digit)")
    return value
