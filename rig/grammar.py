"""The real grammars of recipe values that end up in rendered files or on a command line.

Each check returns the value or raises ValueError with the reason (pydantic turns that into
the one-line RigError). Sources: distribution/reference (image names), RFC 3986 (URL paths),
PEP 508/440 (pip pins), docker/go-units (sizes), compose-go's interpolation (`$`), argparse's
option matching (engine flags). Environment names that are hooks or secrets are in
rig/env_names.py; boot-log patterns (RE2) in rig/log_patterns.py."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterable
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
ENV_KEY_MAX = 128
RECIPE_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
# Recipe and variant names become file names (compose/<name>.<variant>.yaml), boot ids, state
# files and compose project names: bounded far below the 255 bytes a file name may have.
NAME_MAX = 63
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



def control_character(text: str) -> str | None:
    """The first control (Cc), invisible format (Cf: zero-width space, bidirectional overrides that
    reorder what a reviewer sees, BOM), surrogate or line/paragraph separator character in `text`
    (as an escape), or None. A zero-width character makes a pattern or a name silently differ
    from what it shows."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            return ascii(char)[1:-1]
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
    if len(value) > ENV_KEY_MAX:
        raise ValueError(f"environment variable name of {len(value)} characters is longer than {ENV_KEY_MAX}")
    return value


def is_recipe_name(value: str) -> bool:
    return len(value) <= NAME_MAX and _full(RECIPE_NAME, value)


def recipe_name(value: str) -> str:
    if not _full(RECIPE_NAME, value):
        raise ValueError(f"recipe name {value!r} must be lowercase letters, digits and - (not starting with -)")
    if len(value) > NAME_MAX:
        raise ValueError(f"recipe name of {len(value)} characters is longer than {NAME_MAX}")
    return value


def variant_key(value: str) -> str:
    if not _full(RECIPE_NAME, value):
        raise ValueError(f"variant name {value!r} must look like a recipe name: lowercase letters, digits and -")
    if len(value) > NAME_MAX:
        raise ValueError(f"variant name of {len(value)} characters is longer than {NAME_MAX}")
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
    if "%" in value:  # an IPv6 scope id (fe80::1%eth0): Docker cannot publish on one, and it is free text
        raise ValueError(f"{value!r} carries an IPv6 scope id (%...); Docker publishes ports on plain addresses only")
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




# ---- values that reach compose ---------------------------------------------------------------
# Compose substitutes `$NAME`, `${NAME}` and `${NAME:-default}` (nested, too) in every string of a
# compose file; `$$` is a literal `$`. A recipe value holding `${RIG_API_KEY}` would put the key
# on the engine's argv, in its served model name and in compose's error messages.
KEY_VARIABLE = "RIG_API_KEY"
# Compose's image selector: `rig build` tags the image with it, the rendered files run that tag,
# an arm's `image=TAG` sets it.
IMAGE_TAG_VARIABLE = "RIG_IMAGE_TAG"
DEFAULT_IMAGE_TAG = "dev"
_INTERPOLATION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def compose_literal(value: str) -> str:
    """A recipe value that is written into a compose file (or an engine's argv or environment):
    no `$` at all, and no mention of the API key's variable."""
    if "$" in value:
        raise ValueError(f"{value!r} contains '$', which Docker Compose would substitute with a variable "
                         f"(${{{KEY_VARIABLE}}} included)")
    if KEY_VARIABLE.lower() in value.lower():
        raise ValueError(f"{value!r} names {KEY_VARIABLE}: the API key reaches the server only through rig, never a recipe")
    return value


def compose_interpolations(text: str) -> list[str]:
    """The variables compose would substitute in `text` ("$" for a `$` compose cannot parse)."""
    found: list[str] = []
    index = 0
    while (index := text.find("$", index)) >= 0:
        if text.startswith("$$", index):
            index += 2
            continue
        if text.startswith("${", index):
            depth, end = 1, index + 2
            while end < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                end += 1
            inner = text[index + 2:end - 1] if depth == 0 else text[index + 2:]
            name = _INTERPOLATION_NAME.match(inner)
            found.append(name.group(0) if name else "$")
            found += compose_interpolations(inner[name.end():] if name else inner)
            index = end
            continue
        name = _INTERPOLATION_NAME.match(text, index + 1)
        found.append(name.group(0) if name else "$")
        index = name.end() if name else index + 1
    return found


def host_env_default(value: str) -> str:
    """The default of a variable compose reads from the host (rendered as ${NAME:-default})."""
    if not re.fullmatch(r"[A-Za-z0-9._,:/@+-]*", value):
        raise ValueError(f"{value!r} is not a plain default (letters, digits, . _ , : / @ + -)")
    return value


# ---- engine flags rig owns -------------------------------------------------------------------


def owned_flag(token: str, owned: Iterable[str]) -> str | None:
    """The rig-owned flag (rig/engines.py Engine.owned_flags) that `token` would set, in any spelling
    the engines' parsers accept: `--flag`, `--flag=v`, `--flag_name` (vLLM reads _ as -),
    `--flag.key=v` (vLLM's nested form) and every abbreviation argparse expands (`--ho` for
    `--host`, `-t` for `-tp`). `--` alone (the end of options) counts: rig appends after it.
    Refusing every prefix is conservative: argparse accepts an abbreviation only when unique."""
    if token == "--":  # noqa: S105 - an argv token, not a password
        return "--"
    if len(token) < 2 or token[0] != "-" or token[1].isdigit():
        return None
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        spelled = "--" + name[2:].split(".", 1)[0].replace("_", "-")
        for flag in owned:
            if flag.startswith("--") and len(spelled) > 2 and flag.startswith(spelled):
                return flag
        return None
    for flag in owned:
        if flag.startswith("-") and not flag.startswith("--"):
            if flag.startswith(name) or (len(flag) == 2 and name.startswith(flag)):
                return flag
    return None


def flag_value(args: list[str], flags: Iterable[str]) -> str | None:
    """The value the last of `flags` takes in `args` (`--flag v` or `--flag=v`, in every spelling
    owned_flag accepts), as the engine's argparse reads it; None when no such flag is given."""
    wanted = tuple(flags)
    value = None
    for index, token in enumerate(args):
        if token == "--":  # noqa: S105 - the end of options, not a password
            break
        if owned_flag(token, wanted) is None:
            continue
        if "=" in token:
            value = token.split("=", 1)[1]
        elif index + 1 < len(args):
            value = args[index + 1]
    return value


# Load-test names (scenarios, prompt sets, traces, conversation files) become directory and file
# names under results/ and loadtests/: one plain word, so no name can walk out of its directory.
LOAD_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


def load_name(value: str) -> str:
    if not _full(LOAD_NAME, value):
        raise ValueError(f"{value!r} is not a load-test name (lowercase letters, digits and -, at most 64, "
                         "starting with a letter or digit)")
    return value
