"""A race on disk, from simulated boots built through the code `rig compare` runs (records ->
steady window -> RunSummary -> run_result -> BootEntry; tests/simulated_runs.py): the rule's
decisions, the result files, and a race cut short that resumes to the same answer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from simulated_runs import TTFT_S, round_result, simulate_round

from rig.compare.model import BootEntry
from rig.tune.plan import RacePlan
from rig.tune.result import write
from rig.tune.run import Racer, RaceState
from rig.tune.space import load_space

SPACE = REPO / "recipes" / "spaces" / "tiny-cpu-token-delay.yaml"
DURATION_S = 20.0
BASE_STEP_S = 0.006  # tiny-cpu decodes a token in about 6 ms: 1 ms of delay is a sixth of it


def _plan(max_rounds: int = 6) -> RacePlan:
    space = load_space(SPACE, "tiny-cpu", "prose-c1", "base-d0")
    return RacePlan(recipe="tiny-cpu", scenario="prose-c1", space=str(SPACE), candidates=space.candidates, baseline_given=True,
                    constraints=space.constraints, objective="user_decode_tok_s", higher_is_better=True, max_rounds=max_rounds,
                    max_boots=8 * max_rounds, margin_pct=0.3, alpha=0.05, rounds=1, small=True, duration_s=DURATION_S)


class SimulatedRacer(Racer):
    """The race's own loop and rule; each boot a simulated engine whose decode step is the token
    delay's milliseconds longer, with 3% boot noise, seeded by its position (so a resumed race
    draws the same boots). `cut_after`: Ctrl-C once that many boots are on disk."""

    def __init__(self, plan: RacePlan, out: Path, cut_after: int | None = None) -> None:
        super().__init__(plan, out, progress=False, steps=False, port=None)
        self.cut_after, self.booted = cut_after, 0

    def slower(self, index: int) -> float:
        """How much longer a decode step takes on the GPU boot `index` runs on."""
        return 1.0

    def boot(self, index: int, block: int, name: str, label: str) -> BootEntry:
        path = BootEntry.path(self.out, index, name)
        if path.exists():
            entry = BootEntry.read(path)
        else:
            if self.cut_after is not None and self.booted >= self.cut_after:
                raise KeyboardInterrupt
            rng = np.random.default_rng(1000 + index)
            delay_ms = float(self.plan.by_name()[name].env["RIG_TOKEN_DELAY_MS"])
            step = (BASE_STEP_S + delay_ms / 1000) * math.exp(rng.normal(0, 0.03)) * self.slower(index)
            result, _ = round_result(simulate_round(rng, step, TTFT_S, DURATION_S), DURATION_S, None)
            entry = BootEntry(index=index, block=block, arm=name, spec=self.arm_of[name].spec, control=False, attempt=1,
                              rounds=[{"prose-c1": result}], greedy={"p": "same"}, phases_s={"up": 10.0, "load": 20.0})
            entry.write(self.out)
            self.booted += 1
        self.state.entries.append(entry)
        return entry


def _answer(state: RaceState) -> tuple:
    return state.stop, tuple(state.survivors), tuple(sorted((k, v) for k, v in state.eliminated.items())), state.positions


def test_the_race_drops_the_delayed_candidates_and_writes_its_answer_first(tmp_path):
    plan = _plan()
    plan.write(tmp_path)
    state = SimulatedRacer(plan, tmp_path).run()
    assert all(name.endswith("-d0") for name in state.survivors), state.survivors
    assert all(not name.endswith("-d0") for name in state.eliminated)
    assert state.positions <= plan.max_boots and state.stop in ("one", "equivalent", "rounds")
    result, text = write(tmp_path, plan, state)
    assert text.startswith(f"tune: {result.winner} wins (") and result.winner.endswith("-d0")
    assert [row.rank for row in result.rows] == list(range(1, 9)) and result.rows[0].status == "winner"
    assert all(row.status.startswith("eliminated: worse than") for row in result.rows if row.candidate.endswith("-d3"))
    for name in ("tune.md", "tune.json", "tune.png", "winner.yaml", "looks.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert json.loads((tmp_path / "tune.json").read_text())["winner"] == result.winner
    assert f"rig compare tiny-cpu --arm today:RIG_TOKEN_DELAY_MS=0 --arm tuned:@tuned-{result.winner}" in (tmp_path / "winner.yaml").read_text()


def test_the_winner_variant_is_a_variant_the_recipe_accepts(tmp_path):
    import yaml

    from rig.deploy.recipe import check_semantics, load
    from rig.deploy.recipe_model import Variant

    plan = _plan()
    plan.write(tmp_path)
    result, _ = write(tmp_path, plan, SimulatedRacer(plan, tmp_path).run())
    (name, body), = yaml.safe_load((tmp_path / "winner.yaml").read_text()).items()
    recipe = load("tiny-cpu").recipe
    check_semantics(recipe.model_copy(update={"variants": {**recipe.variants, name: Variant.model_validate(body)}}), "winner.yaml")
    assert body["adapters"] == [{"name": "token_delay", "gates": {"RIG_TOKEN_DELAY_MS": "0"}}]


@pytest.mark.parametrize("cut_after", [1, 9, 20])
def test_a_race_cut_short_resumes_to_the_same_answer(tmp_path, cut_after):
    plan = _plan()
    whole = tmp_path / "whole"
    cut = tmp_path / "cut"
    for out in (whole, cut):
        out.mkdir()
        plan.write(out)
    expected = _answer(SimulatedRacer(plan, whole).run())
    with pytest.raises(KeyboardInterrupt):
        SimulatedRacer(RacePlan.read(cut), cut, cut_after=cut_after).run()
    assert _answer(SimulatedRacer(RacePlan.read(cut), cut).run()) == expected


@pytest.mark.parametrize("space,winner", [("llama8b-decode-batch", "seqs64"), ("llama8b-gpu-delay", "us12")])
def test_a_gpu_winner_is_written_as_a_variant_that_boots_what_the_race_booted(space, winner):
    """The variant keeps the recipe's topology (a GPU recipe's GPUs) and carries the candidate's
    server arguments and adapter gates: resolved, it is what the race booted."""
    import yaml

    from rig.deploy.recipe import check_semantics, load
    from rig.deploy.recipe_model import Variant
    from rig.tune.result import winner_variant
    from rig.tune.space import resolve

    path = REPO / "recipes" / "spaces" / f"{space}.yaml"
    scenario = "decode-c32" if "batch" in space else "prose-c1"
    candidates = load_space(path, "llama8b-h200", scenario).candidates
    plan = _plan().model_copy(update={"recipe": "llama8b-h200", "scenario": scenario, "candidates": candidates})
    name, text = winner_variant(plan, winner, "one candidate remains")
    (written, body), = yaml.safe_load(text).items()
    recipe = load("llama8b-h200").recipe
    tuned = recipe.model_copy(update={"variants": {**recipe.variants, name: Variant.model_validate(body)}})
    check_semantics(tuned, "winner.yaml")
    _, raced = resolve("llama8b-h200", next(c for c in candidates if c.name == winner))  # as the candidate ran
    as_written = tuned.variant(name)
    assert written == name and "topology" not in body
    assert as_written.server_args == raced.server_args and as_written.topology == raced.topology
    assert as_written.full_env() == raced.full_env()


def test_boots_with_no_usable_figure_are_named_beside_the_table():
    """The figure column averages usable boots only while the intervals allow for each boot's round,
    so a table with missing cells says which boots they are."""
    from types import SimpleNamespace

    from rig.tune.result import missing_cells_note

    boots = [SimpleNamespace(arm=arm, block=block) for arm in ("d0", "d1") for block in range(3)]
    full = {"d0": {0: [10.0], 1: [11.0], 2: [10.5]}, "d1": {0: [9.0], 1: [9.5], 2: [9.2]}}
    assert missing_cells_note(full, boots) is None
    gaps = {"d0": {2: [10.5]}, "d1": {0: [9.0], 1: [-1.0], 2: [9.2]}}
    note = missing_cells_note(gaps, boots)
    assert note is not None and note.startswith("3 of 6 measured boots gave no usable figure (d0 2, d1 1)")


def test_a_baseline_that_wins_is_kept_without_a_compare_line_against_itself():
    """A `rig compare` of today's settings against themselves is an A/A check: winner.yaml says to
    keep them instead."""
    from rig.tune.result import winner_variant

    plan = _plan()
    _, won = winner_variant(plan, plan.candidates[0].name, "one candidate remains")
    _, lost = winner_variant(plan, plan.candidates[1].name, "one candidate remains")
    assert "keep today's settings" in won and "rig compare" not in won
    assert "rig compare tiny-cpu --arm today:" in lost and "keep today's settings" not in lost


def test_the_time_left_is_the_most_the_race_can_take_from_the_boots_measured_so_far():
    from rig.tune.run import time_left

    assert time_left([], 5) == "" and time_left([60.0], 0) == ""
    assert time_left([50.0, 70.0, 400.0], 6).startswith("; at most about 7 min left (6 boot(s) if no candidate leaves")


@pytest.mark.parametrize("max_boots,counts", [
    (9, [9, 8, 7, 6, 5, 4, 3, 2, 1]),  # three whole rounds of three
    (10, [9, 8, 7, 6, 5, 4, 3, 2, 1]),  # a tenth boot starts no round: the race runs whole rounds only
    (7, [6, 5, 4, 3, 2, 1]),  # two rounds fit, the third would pass the budget
])
def test_the_boots_left_count_only_boots_the_budgets_let_run(max_boots, counts):
    from rig.tune.run import RaceState, boots_left

    plan = _plan(max_rounds=3).model_copy(update={"max_boots": max_boots})
    state = RaceState(survivors=["a", "b", "c"])
    seen = []
    for round_index in range(3):
        if state.positions + 3 > max_boots:
            break
        seen += [boots_left(plan, state, round_index, position) for position in range(3)]
        state.positions += 3
    assert seen == counts


class HostsRacer(SimulatedRacer):
    """Each boot's fingerprint from `hosts(index)`: (GPU model, GPU uuid, how much slower it decodes)."""

    def __init__(self, plan: RacePlan, out: Path, hosts) -> None:
        super().__init__(plan, out)
        self.hosts = hosts

    def slower(self, index: int) -> float:
        return self.hosts(index)[2]

    def boot(self, index: int, block: int, name: str, label: str) -> BootEntry:
        from rig.observe.fingerprint import Fingerprint, GpuFacts

        entry = super().boot(index, block, name, label)
        model, uuid, _ = self.hosts(index)
        entry.fingerprint = Fingerprint(taken_at=float(index), hostname=f"host-{uuid}", kernel="6.8", os="linux", cpu="x86",
                                        cpu_count=16, environment={}, driver_version="580.159.04", gpu_count=1,
                                        gpus=[GpuFacts(index=0, name=model, uuid=uuid, power_limit_w=700.0)])
        return entry


def test_a_race_resumed_on_another_kind_of_gpu_stops_void_at_that_boot(tmp_path):
    plan = _plan()
    plan.write(tmp_path)
    state = HostsRacer(plan, tmp_path, lambda i: ("NVIDIA H100 80GB HBM3", "GPU-a", 1.0) if i < 5 else ("NVIDIA H200", "GPU-b", 1.0)).run()
    assert state.stop == "conditions" and len(state.entries) == 6  # no boot after the first that differed
    assert state.void == ["gpus.0.name: NVIDIA H100 80GB HBM3 vs NVIDIA H200"]
    result, text = write(tmp_path, plan, state)
    assert text.startswith("tune: VOID: the boots ran under different conditions (gpus.0.name: ") and "no winner" in text
    assert result.winner == "" and all(row.status == "not judged: the race is void" for row in result.rows)
    assert not (tmp_path / "winner.yaml").exists()


def test_a_round_finished_on_a_slower_gpu_of_the_same_kind_is_split_by_gpu(tmp_path):
    """The race moves to a GPU 8% slower after 5 boots of its first round: without the split, the
    round's last three candidates (a d0 among them) would carry the slower GPU into their intervals."""
    plan = _plan()
    plan.write(tmp_path)
    state = HostsRacer(plan, tmp_path, lambda i: ("NVIDIA H100 80GB HBM3", "GPU-a" if i < 5 else "GPU-b",
                                                   1.0 if i < 5 else 1.08)).run()
    assert not state.void and all(name.endswith("-d0") for name in state.survivors), state.survivors
    assert all(not name.endswith("-d0") for name in state.eliminated)
    on_b = {e.arm for e in state.entries if e.block == 0 and e.index >= 5}
    assert len(on_b) == 3 and state.looks[0].best not in on_b
    # after round 1 none of them is paired with the best, which ran on the other GPU; after round 2,
    # all on GPU-b, each is paired once
    assert {s.candidate for s in state.looks[0].standings if s.pairs == 0} == on_b
    assert all(s.pairs == 1 for s in state.looks[1].standings if s.candidate in on_b and state.looks[1].best not in on_b)
    result, _ = write(tmp_path, plan, state)
    assert any(note.startswith("the measured boots ran on 2 GPUs of the same kind (GPU-a 5, GPU-b ") for note in result.notes)
