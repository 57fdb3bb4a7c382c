"""The bounds every load input is held to (scenarios, traces, conversations, the Locust
configuration) and the strict number types they are written with: each bound is far above any
real workload and far below what exhausts a machine.

pydantic, rig.grammar and the standard library only: the Locust processes import it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictFloat, StrictInt, StrictStr

from rig import grammar

PROMPT_POOL = 16  # prompts per scenario run, cycled by the users

MAX_USERS = 20_000  # Locust users of one run (c=3000 is the largest shipped)
MAX_WORKERS = 512  # Locust worker processes of one run (--workers)
MAX_PROMPT_TOKENS = 1 << 20
MAX_OUTPUT_TOKENS = 1 << 18
MIN_DURATION_S = 1.0  # a measurement window: shorter holds a request or two (a 0.001 s one was lengthened silently)
MAX_DURATION_S = 86_400.0
MAX_TIMEOUT_S = 7_200.0
MAX_RATE = 10_000.0  # requests per second
MAX_ARRIVALS = 1_000_000  # requests one open-loop schedule may hold
MAX_TURNS = 64
MAX_BLOCK_TOKENS = 4_096

Name = Annotated[StrictStr, AfterValidator(grammar.load_name)]
Number = StrictFloat | StrictInt  # a float field also takes a whole number; never a string or a bool


def bounded_int(low: int, high: int) -> Any:
    return Annotated[StrictInt, Field(ge=low, le=high)]


def bounded_seconds(low: float, high: float, open_low: bool = False) -> Any:
    return Annotated[StrictFloat, Field(gt=low, le=high) if open_low else Field(ge=low, le=high)]
