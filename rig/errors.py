"""The one error type users see: a single line naming the file, the field and the fix."""

from __future__ import annotations


class RigError(Exception):
    """An error a user can act on. `rig` prints str(error) and exits 2, never a traceback."""

    def __init__(self, where: str, field: str, problem: str, fix: str) -> None:
        self.where, self.field, self.problem, self.fix = where, field, problem, fix
        super().__init__(f"{where}: {field}: {problem}; fix: {fix}")
