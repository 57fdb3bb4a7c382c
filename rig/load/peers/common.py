"""What the peer formats share: one completed request in the peers' terms, the strict base of the
models their files are read with, and the check that holds a record built from a peer's row to what
rig's own reader holds a stored record to."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from rig.errors import Invalid
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done, e2e, itl, ttft
from rig.typed import STORED, first_problem

NS = 1_000_000_000


class PeerRequest(NamedTuple):
    """One completed request in the peers' terms (seconds): TTFT, latency and ITL as rig defines them
    (rig.load.request_metrics); TPOT by vLLM's own definition, (latency - ttft) / (output_len - 1)
    on the server's token count, which is what its result files hold (None under two tokens)."""

    ttft: float
    latency: float
    itl: list[float]
    output: int
    input: int
    tpot: float | None

    @classmethod
    def of(cls, done: Done) -> PeerRequest:
        record = done.record
        first, latency = ttft(done), e2e(done)
        output = record.usage_tokens if record.usage_tokens is not None else len(record.chunks)
        return cls(ttft=first, latency=latency, itl=itl(done), output=output, input=record.prompt_tokens or 0,
                   tpot=(latency - first) / (output - 1) if output > 1 else None)


class Peer(BaseModel):
    # The fields rig reads are typed strictly; a peer's other fields (its schema grows) are ignored.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


def plausible(record: RequestRecord, where: str, field: str, fix: str) -> RequestRecord:
    """A record built from a peer's row holds to what rig's own reader holds a stored record to (times
    in order, counts non-negative), so a bad row is refused here, naming the peer's file and row,
    not later in rig's copy of it."""
    try:
        RequestRecord.model_validate(record.model_dump(), context=STORED)
    except ValidationError as error:
        raise Invalid(where, field, first_problem(error)[1], fix) from None
    return record
