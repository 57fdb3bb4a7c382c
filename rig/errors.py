"""The one error type users see: a single line naming the file, the field and the fix, and its
kinds, which callers branch on (never on message text or on built-in exception types):

- NotFound: what was asked for is not there (a file, a boot, a comparison);
- Damaged: it is there but is not what rig wrote or can read: not a regular file, too large,
  cut short, not UTF-8, not JSON or YAML, another schema version, wrong types;
- Invalid: it reads, but a value breaks a rule (a recipe field, a scenario bound, a flag).

`rig compare --resume` redoes a boot whose entry is NotFound or Damaged; a reader of user input
reports every kind the same way (one line, exit 2).
"""

from __future__ import annotations


class RigError(Exception):
    """An error a user can act on. `rig` prints str(error) and exits 2, never a traceback."""

    def __init__(self, where: str, field: str, problem: str, fix: str) -> None:
        self.where, self.field, self.problem, self.fix = where, field, problem, fix
        super().__init__(f"{where}: {field}: {problem}; fix: {fix}")


class NotFound(RigError):
    """What was asked for is not there."""


class Damaged(RigError):
    """It is there but cannot be read as what rig wrote (or as a file of its kind at all)."""


class Invalid(RigError):
    """It reads, but a value breaks a rule."""
