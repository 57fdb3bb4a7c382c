"""The one error type users see: a single line naming the file, the field and the fix, and its
kinds, which callers branch on (never on message text or on built-in exception types):

- NotFound: what was asked for is not there (a file, a boot, a comparison);
- Damaged: it is there but is not what rig wrote or can read: not a regular file, too large,
  cut short, not UTF-8, not JSON or YAML, another schema version, wrong types;
- Invalid: it reads, but a value breaks a rule (a recipe field, a scenario bound, a flag);
- StepFailed: the input was fine, but a step against a running server failed (it answered an
  error, died mid-answer): exit 1, not 2.

`rig compare --resume` redoes a boot whose entry is NotFound or Damaged; a reader of user input
reports every kind the same way (one line, exit 2).
"""

from __future__ import annotations

import re

# What would break the one line or hide its text (control characters, line and paragraph
# separators, bidirectional overrides): a crafted key or file name is shown escaped, as Python writes it.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\ud800-\udfff]")


def one_line(text: str) -> str:
    return _UNPRINTABLE.sub(lambda found: found.group(0).encode("unicode_escape", "backslashreplace").decode("ascii"), str(text))


def closest(word: str, names: list[str]) -> str | None:
    """The one of `names` that `word` is most likely a misspelling of (difflib's ratio >= 0.6), if any."""
    import difflib

    return next(iter(difflib.get_close_matches(word, names, n=1, cutoff=0.6)), None)


class RigError(Exception):
    """An error a user can act on. `rig` prints str(error) and exits 2, never a traceback. Each part
    is one line whatever it quotes: a character that would break or hide it is shown escaped."""

    def __init__(self, where: str, field: str, problem: str, fix: str) -> None:
        self.where, self.field, self.problem, self.fix = (one_line(part) for part in (where, field, problem, fix))
        super().__init__(f"{self.where}: {self.field}: {self.problem}; fix: {self.fix}")


class NotFound(RigError):
    """What was asked for is not there."""


class Damaged(RigError):
    """It is there but cannot be read as what rig wrote (or as a file of its kind at all)."""


class Invalid(RigError):
    """It reads, but a value breaks a rule."""


class StepFailed(RigError):
    """The input was fine; a step against a running server failed (an error status, a cut stream)."""
