"""The one base of every typed shape rig reads or writes: recipes and scenarios (user input),
boot records, run summaries, comparison entries and analyses, and the files rig's processes
hand each other (the Locust configuration, window events, client statistics, runs.jsonl).

Strict: no coercion (a "3" is not a 3), unknown keys refused (a renamed key is an error, never a
silent None), read by attribute. A shape stored on its own (a file, a JSON line) is `Versioned`:
it carries its schema version under the key "schema", and a reader refuses any other version in
one line instead of guessing at an older layout.

Only pydantic, rig.errors and the standard library: the Locust processes (also remote workers) import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from rig.errors import Damaged, closest

# --- The bounds of every number rig reads -------------------------------------------------------
# A number read back (a record, a summary, an entry) or imported (a peer's file, a checkpoint's
# config.json) is held to one of these types: finite, and bounded far above any real value and far
# below what overflows a later product, a datetime or an int conversion. A time of 1e308 or a token
# count of 1e300 is then refused where it is read, naming the file and field, instead of crashing an
# export or becoming a decode rate of 1e299.
MAX_TIME_S = 1e11  # seconds since the epoch (the year 5138): a larger "time" is no time
MAX_SECONDS = 1e8  # a duration (three years): longer than any run, boot or comparison
MAX_TOKENS = 1 << 24  # tokens of one request or one model dimension (contexts and vocabularies are ~10^5-10^7)
MAX_COUNT = 1 << 53  # requests, chunks, bytes: every count a double holds exactly
MAX_MAGNITUDE = 1e15  # any other figure read back (a rate, a share, milliseconds): beyond it, no measurement
MAX_INT = (1 << 63) - 1  # any whole number read back: a signed 64-bit one

Epoch = Annotated[float, Field(ge=0, le=MAX_TIME_S)]  # wall-clock seconds since the epoch
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]  # a duration
Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]  # a token count (of a request, a chunk, a dimension)
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Finite = Annotated[float, Field(ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]  # any other figure


def _beyond(value: Any, depth: int = 0) -> bool:
    """Whether a number inside `value` (a number, or lists, tuples and dicts of them; a nested model
    checks its own fields) lies beyond MAX_MAGNITUDE, or an int beyond a signed 64-bit one (a seed
    may take all 63 bits; a larger int is no value any JSON reader keeps)."""
    if isinstance(value, bool) or depth > 8:
        return False
    if isinstance(value, int):
        return abs(value) > MAX_INT
    if isinstance(value, float):
        return abs(value) > MAX_MAGNITUDE
    if isinstance(value, (list, tuple)):
        try:  # a list of numbers (a record's chunk times) is checked by its extremes, at C speed
            extremes = (min(value), max(value)) if value else ()
        except TypeError:  # numbers beside None or text
            extremes = None
        if extremes is not None and all(isinstance(end, (int, float)) and end == end for end in extremes):  # a NaN orders nothing
            return any(_beyond(end, depth + 1) for end in extremes)
        return any(_beyond(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return any(_beyond(item, depth + 1) for item in value.values())
    return False


class Typed(BaseModel):
    # allow_inf_nan=False: a NaN or an infinity is no measurement; one in a record, a summary or a plan
    # (read back, or built in code) is refused instead of poisoning every mean and plot it enters.
    model_config = ConfigDict(extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True, allow_inf_nan=False)

    # No "before" model validators here or in a subclass: one turns a JSON document into Python
    # objects first, and strict validation then refuses a JSON array for a tuple.

    @field_validator("*", mode="after")
    @classmethod
    def _within_stored_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        """A shape read back holds no number beyond MAX_MAGNITUDE in any field, typed more closely
        (Epoch, Seconds, Tokens, Count) or not: the backstop for every figure of every stored shape."""
        if info.context == STORED and _beyond(value):
            raise ValueError(f"a number beyond {MAX_MAGNITUDE:g} (a whole number beyond 2^63) is no figure rig writes")
        return value


class StoredRecordError(Damaged):
    """A stored record that is not one this rig writes (damaged, edited, or another schema version):
    one line, naming where it was read from, the field, what is wrong and what to do."""

    def __init__(self, where: str, field: str, problem: str,
                 fix: str = "re-create it with this version of rig (a new run or results directory)") -> None:
        super().__init__(where, field, problem, fix)


def first_problem(error: ValidationError) -> tuple[str, str]:
    """(dotted field, message) of a validation error's first problem, on one line."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return field, " ".join(str(first["msg"]).removeprefix("Value error, ").split())


def misspelled(error: ValidationError) -> tuple[tuple[Any, ...], str, str] | None:
    """A required field reported missing beside an unknown key that is close to its name (`servng:`
    for `serving:`): (the unknown key's location, the problem, the fix). The user wrote the field,
    misspelled: that, not "Field required", is the problem to name."""
    problems = error.errors()
    missing = [e["loc"] for e in problems if e["type"] == "missing" and e["loc"]]
    extra = [e["loc"] for e in problems if e["type"] == "extra_forbidden" and e["loc"]]
    for loc in extra:
        wanted = [m[-1] for m in missing if m[:-1] == loc[:-1] and isinstance(m[-1], str)]
        right = closest(str(loc[-1]), wanted)
        if right:
            wrong = str(loc[-1])
            return tuple(loc), f"{wrong} is not a field, and {right} is required", f"rename {wrong} to {right}"
    return None


def written_fix(error: ValidationError, model: type[BaseModel]) -> str | None:
    """The fix of a hand-written file's first problem, where its kind names one: an unknown top-level
    key close to one of `model`'s fields (`envs:` for `env:`), or a bare YAML number or boolean where
    text is wanted (`RIG_X: 0`, which YAML reads as an int, for `RIG_X: "0"`). None: no such fix."""
    first = error.errors()[0]
    loc, kind, value = first["loc"], first["type"], first.get("input")
    if kind == "extra_forbidden" and len(loc) == 1:
        fields = [f.alias or name for name, f in model.model_fields.items()]
        close = closest(str(loc[0]), fields)
        return f"did you mean {close}:?" if close else f"the keys are {', '.join(fields)}"
    if kind == "string_type" and isinstance(value, bool | int | float):
        read_as = f"the boolean {str(value).lower()}" if isinstance(value, bool) else f"the number {value}"
        return f"quote the value as you wrote it, e.g. \"0\" (YAML read it as {read_as}; this field takes text)"
    return None


STORED = {"stored": True}


class Versioned(Typed):
    """A shape stored on its own. Subclasses redeclare `schema_version` with their own version as
    its default; reading a record of any other version fails in one line."""

    schema_version: int = Field(alias="schema")

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
        record = cls.parse_line(text, where)
        if record is None:
            raise StoredRecordError(where, "(file)", "not valid JSON (cut short?)")
        return record

    @classmethod
    def parse_line(cls, line: str | bytes, where: str) -> Self | None:
        """One JSON line of a stored record; None for a line cut by a kill mid-write (not JSON)."""
        try:
            record = cls.model_validate_json(line, context=STORED)
        except ValidationError as error:
            if error.errors()[0]["type"] == "json_invalid":
                return None
            field, problem = first_problem(error)
            raise StoredRecordError(where, field, problem) from None
        # A record built in code takes its class's version; one read back must say which it is.
        if "schema_version" not in record.model_fields_set:
            raise StoredRecordError(where, "schema", "no schema version: not a record rig wrote")
        return record

    @classmethod
    def read_file(cls, path: Path, max_bytes: int) -> Self:
        """A stored record read with the guards of every file rig reads back (a regular file, a
        size cap, no duplicate keys: rig.strict_yaml.load_json_file), then validated as JSON."""
        import json

        from rig.strict_yaml import load_json_file

        return cls.parse(json.dumps(load_json_file(path, max_bytes)), str(path))

    def json_text(self, indent: int | None = 1, exclude_none: bool = False) -> str:
        return self.model_dump_json(indent=indent, exclude_none=exclude_none)


class Spec(Typed):
    """User input (a recipe, a scenario, a data row): immutable once validated."""

    model_config = ConfigDict(frozen=True)
