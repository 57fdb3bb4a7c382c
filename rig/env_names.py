"""Environment names a recipe, variant or overlay may not set, or that rig never writes down by value.

A hook variable makes a process load code, or read or write a file it names, before rig's own setup
runs; a secret-looking name (or a value carrying credentials) is redacted wherever rig records an
environment. Patterns are shell globs (fnmatch), matched case-sensitively as the process reads them."""

from __future__ import annotations

import re
from collections.abc import Collection
from fnmatch import fnmatchcase

# Names that make a process load code, or read or write a file it names, before rig's own setup
# runs: the dynamic loader, interpreters, shells and libraries' plugin and file hooks. A recipe,
# variant or overlay sets one only where its engine's row allows it (Engine.allowed_env).
HOOK_VARIABLES: dict[str, str] = {
    "LD_*": "the dynamic loader reads it (preloaded libraries, library search paths, audit modules)",
    "GCONV_PATH": "glibc loads conversion modules from it",
    "GLIBC_TUNABLES": "it changes glibc's own behaviour at load",
    "PATH": "it picks which python3 and engine executables run",
    "PYTHON*": "the Python interpreter reads it at start (import paths, startup files, hooks, warnings imports)",
    "BASH_ENV": "a shell sources the file it names",
    "ENV": "a shell sources the file it names",
    "SHELLOPTS": "it changes every shell the entrypoint starts",
    "BASHOPTS": "it changes every shell the entrypoint starts",
    "IFS": "it changes how the entrypoint's shell splits words",
    "PERL5*": "Perl loads modules from it", "PERLLIB": "Perl loads modules from it",
    "NODE_OPTIONS": "Node loads modules from it", "NODE_PATH": "Node loads modules from it",
    "RUBYOPT": "Ruby loads libraries from it", "RUBYLIB": "Ruby loads libraries from it",
    "*_PRELOAD": "it names a library to preload",
    "CUDA_INJECTION*": "CUDA loads the library it names into the process",
    "NCCL_*PLUGIN*": "NCCL loads the plugin library it names",
    "NCCL_*FILE*": "NCCL reads or writes the file it names",
    "NCCL_*PATH*": "NCCL reads from the path it names",
}
# Interpreter settings that change no code path: allowed.
HARMLESS_VARIABLES = frozenset({"PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
                                "PYTHONFAULTHANDLER", "PYTHONIOENCODING", "PYTHONUTF8"})


def hook_variable(name: str, allowed: Collection[str] = ()) -> str | None:
    """Why `name` may not be set by a recipe or an overlay (a loader or interpreter hook), or None.
    `allowed` holds names or globs the engine's registry row allows."""
    if name in HARMLESS_VARIABLES or any(fnmatchcase(name, pattern) for pattern in allowed):
        return None
    for pattern, why in HOOK_VARIABLES.items():
        if fnmatchcase(name, pattern):
            return why
    return None


# A name is secret-looking when it holds one of these words (split at _), ends in one of the
# others (HF_TOKEN, but not RIG_TOKEN_DELAY_MS or MAX_TOKENS), or has one glued on (MYAPIKEY).
_SECRET_ANYWHERE = frozenset({"SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE", "APIKEY", "CREDENTIAL",
                              "CREDENTIALS", "PRIVATE", "COOKIE"})
_SECRET_LAST = frozenset({"TOKEN", "KEY", "PAT", "AUTH", "SIGNATURE", "DSN", "PASS"})
_SECRET_SUFFIXES = ("APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
_SECRET_PAIRS = ("API_KEY", "ACCESS_KEY", "AUTH_TOKEN", "ACCESS_TOKEN")


def secret_looking(name: str) -> bool:
    upper = name.upper()
    words = upper.split("_")
    return (any(word in _SECRET_ANYWHERE for word in words) or words[-1] in _SECRET_LAST
            or upper.endswith(_SECRET_SUFFIXES) or any(pair in upper for pair in _SECRET_PAIRS))


_CREDENTIALS_IN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]+@")  # scheme://user[:password]@host


def secret_pair(name: str, value: str) -> bool:
    """A KEY=VALUE that must not be written down: a secret-looking name, or a value that carries
    credentials whatever its name (HTTPS_PROXY=http://user:pw@proxy, DATABASE_URL, a DSN's key)."""
    return secret_looking(name) or _CREDENTIALS_IN_URL.match(value) is not None
