"""The one base of every typed shape rig reads or writes: recipes and scenarios (user input),
boot records, run summaries, comparison entries and analyses, and the files rig's processes
hand each other (the Locust configuration, window events, client statistics, runs.jsonl).

Strict: no coercion (a "3" is not a 3), unknown keys refused (a renamed key is an error, never a
silent None), read by attribute. A shape stored on its own (a file, a JSON line) is `Versioned`:
it carries its schema version under the key "schema", and a reader refuses any other version in
one line instead of guessing at an older layout.

Only pydantic and the standard library: the Locust processes (also remote workers) import it.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator


class Typed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)


class StoredRecordError(ValueError):
    """A stored record that is not one this rig writes (damaged, edited, or another schema version):
    one line, naming where it was read from, the field and what is wrong."""

    def __init__(self, where: str, field: str, problem: str) -> None:
        self.where, self.field, self.problem = where, field, problem
        super().__init__(f"{where}: {field}: {problem}")


def first_problem(error: ValidationError) -> tuple[str, str]:
    """(dotted field, message) of a validation error's first problem, on one line."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return field, " ".join(str(first["msg"]).removeprefix("Value error, ").split())


_STORED = {"stored": True}


class Versioned(Typed):
    """A shape stored on its own. Subclasses redeclare `schema_version` with their own version as
    its default; reading a record of any other version fails in one line."""

    schema_version: int = Field(alias="schema")

    @model_validator(mode="before")
    @classmethod
    def _stored_with_version(cls, data: Any, info: ValidationInfo) -> Any:
        # A record built in code takes its class's version; one read back must say which it is.
        if info.context == _STORED and isinstance(data, dict) and "schema" not in data:
            raise ValueError("no schema version: not a record rig wrote")
        return data

    @field_validator("schema_version")
    @classmethod
    def _this_version(cls, value: int) -> int:
        expected = cls.model_fields["schema_version"].default
        if value != expected:
            raise ValueError(f"schema {value} is not {expected}: written by another version of rig (re-run it with this one)")
        return value

    @classmethod
    def parse(cls, text: str | bytes, where: str) -> Self:
        """A stored record from its JSON text; StoredRecordError (one line) when it is not one."""
        try:
            return cls.model_validate_json(text, context=_STORED)
        except ValidationError as error:
            field, problem = first_problem(error)
            raise StoredRecordError(where, field, problem) from None

    def json_text(self, indent: int | None = 1, exclude_none: bool = False) -> str:
        return self.model_dump_json(indent=indent, exclude_none=exclude_none)



class Spec(Typed):
    """User input (a recipe, a scenario, a data row): immutable once validated."""

    model_config = ConfigDict(frozen=True)
