"""Every kind of load-test scenario, each declared once: how it offers its load, the section of a
scenario file it needs, the endpoint it requires, and the Locust user class that runs it. A consumer
asks a kind's properties (`KINDS[scenario.kind].replays`), never compares its name with a string of
its own (tests/load/test_scenario_kinds.py holds that), so adding a kind touches this file, its
headline in rig.load.figures, and the user class it names in rig.load.client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Kind = Literal["decode", "prefill", "concurrency", "open_loop", "trace", "multi_turn"]
# How a kind offers its load: users in a closed loop (each sends its next request when the last one
# ends), a schedule of arrivals drawn by rig (open loop), or a trace's own timestamps replayed.
Arrivals = Literal["closed", "schedule", "replay"]


@dataclass(frozen=True, kw_only=True)
class ScenarioKind:
    name: Kind
    arrivals: Arrivals
    section: str | None = None  # the scenario file's section the kind needs, which no other kind may have
    endpoint: str | None = None  # the one endpoint it can send to (None: any)
    user_class: str = "LLMUser"  # the Locust user class its processes run (rig.load.client)
    sweeps_rate: bool = False  # `rig sweep --rates` steps its arrival rate

    @property
    def arrival_driven(self) -> bool:
        """Requests arrive on a schedule, whatever the server's pace: the window and the client's
        statistics follow the schedule, not a pool of users."""
        return self.arrivals != "closed"

    @property
    def replays(self) -> bool:
        """A trace's own timestamps are replayed (each request's lengths come from the trace)."""
        return self.arrivals == "replay"

    @property
    def conversations(self) -> bool:
        """Each user holds a conversation and sends its whole history every turn."""
        return self.section == "conversation"


KINDS: dict[str, ScenarioKind] = {kind.name: kind for kind in (
    ScenarioKind(name="decode", arrivals="closed"),
    ScenarioKind(name="prefill", arrivals="closed"),
    ScenarioKind(name="concurrency", arrivals="closed"),
    ScenarioKind(name="open_loop", arrivals="schedule", section="arrivals", user_class="ArrivalUser", sweeps_rate=True),
    ScenarioKind(name="trace", arrivals="replay", section="trace", user_class="ArrivalUser"),
    ScenarioKind(name="multi_turn", arrivals="closed", section="conversation", endpoint="chat", user_class="ConversationUser"),
)}
assert tuple(KINDS) == get_args(Kind), "every Kind is declared once, in Kind's order"

CLOSED_KINDS = tuple(name for name, kind in KINDS.items() if not kind.arrival_driven)
ARRIVAL_KINDS = tuple(name for name, kind in KINDS.items() if kind.arrival_driven)
