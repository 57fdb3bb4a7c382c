"""Goodput as a race's objective: SLOs named in the space or on the command line, checked before any
boot, each round's goodput read again from its records with the client's bound applied (a request
within the bound of a limit counts as missing it: docs/client-error.md, R17), and a race decided on it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from simulated_runs import TTFT_S, round_result, simulate_round

from rig.compare.model import BootEntry, RunResult
from rig.errors import RigError
from rig.load.goodput import parse_slos as parse_goodput
from rig.load.records import RequestRecord
from rig.tune.goodput import OBJECTIVE, goodput_boots, round_goodput
from rig.tune.plan import RacePlan
from rig.tune.result import write
from rig.tune.run import Racer
from rig.tune.space import load_space

SPACE = REPO / "recipes" / "spaces" / "tiny-cpu-token-delay.yaml"
TWO = "env: {a: {RIG_TOKEN_DELAY_MS: '0'}, b: {RIG_TOKEN_DELAY_MS: '1'}}\n"


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text,slos", [
    ("ttft:500,tpot:50", {"ttft": 0.5, "tpot": 0.05}),  # vLLM's form, milliseconds
    ("ttft:500 e2el:2000", {"ttft": 0.5, "e2e": 2.0}),  # vLLM's e2el is rig's e2e
    ("ttft<=2s,tpot<=50ms", {"ttft": 2.0, "tpot": 0.05}),  # rig compare's form
])
def test_goodput_slos_are_read_in_vllms_form_and_in_rig_compares(text, slos):
    assert parse_goodput(text) == slos


@pytest.mark.parametrize("text", ["ttft:0", "itl:5", "ttft:5,ttft:6", "ttft=5", "ttft:nan"])
def test_a_bad_goodput_is_refused_in_one_line(text):
    with pytest.raises(RigError) as refused:
        parse_goodput(text)
    assert refused.value.field.startswith("--goodput") and refused.value.fix and "\n" not in str(refused.value)


def test_a_space_names_its_slos_and_the_race_objective_becomes_goodput(tmp_path):
    space = load_space(_file(tmp_path, "s.yaml", TWO + "goodput: {ttft: 500, e2el: 3000}\n"), "tiny-cpu", "prose-c1")
    assert space.slos == {"ttft": 0.5, "e2e": 3.0}
    assert load_space(SPACE, "tiny-cpu", "prose-c1", goodput="tpot:50").slos == {"tpot": 0.05}
    assert load_space(SPACE, "tiny-cpu", "prose-c1").slos is None


@pytest.mark.parametrize("text,goodput,scenario,where,field", [
    (TWO + "goodput: {itl: 5}\n", None, "prose-c1", "space", "goodput.itl"),
    (TWO + "goodput: {ttft: -1}\n", None, "prose-c1", "space", "goodput.ttft"),
    (TWO + "goodput: {}\n", None, "prose-c1", "space", "goodput"),
    (TWO + "goodput: {tpot: 50}\n", None, "prefill-8k", "space", "goodput.tpot"),  # one token: no TPOT
    (TWO, "tpot:50", "prefill-8k", "command line", "--goodput"),
    (TWO + "goodput: {ttft: 500}\n", "ttft:400", "prose-c1", "command line", "--goodput"),  # named twice
])
def test_an_slo_the_scenario_cannot_give_is_refused_before_anything_boots(tmp_path, text, goodput, scenario, where, field):
    path = _file(tmp_path, "s.yaml", text)
    with pytest.raises(RigError) as refused:
        load_space(path, "tiny-cpu", scenario, goodput=goodput)
    assert refused.value.where == (str(path) if where == "space" else where) and refused.value.field == field
    assert refused.value.fix and "\n" not in str(refused.value)


def _records(ttfts: list[float]) -> list[RequestRecord]:
    out = []
    for i, ttft in enumerate(ttfts):
        sent = 10.0 * i
        chunks = [sent + ttft + 0.01 * k for k in range(8)]
        out.append(RequestRecord(id=f"p-{i}", process="p", user="u0", prompt="p0", t_send=sent, status=200, t_first=chunks[0],
                                 t_last=chunks[-1], t_end=chunks[-1], chunks=chunks, finish_reason="length",
                                 usage={"completion_tokens": 8, "prompt_tokens": 4}, prompt_tokens_target=4))
    return out


def _round(tmp_path: Path, ttfts: list[float], bound: float | None) -> RunResult:
    run = tmp_path / "run"
    run.mkdir()
    (run / "records-p.jsonl").write_text("".join(r.to_line() + "\n" for r in _records(ttfts)))
    bounds = {"ttft_p50_ms": bound, "ttft_p99_ms": bound}
    return RunResult(scenario="prose-c1", dir=str(run), figures={}, problems=[], window=(0.0, 10.0 * len(ttfts)),
                     client_bounds=bounds)


def test_a_request_within_the_clients_bound_of_a_limit_counts_as_missing_it(tmp_path):
    # TTFTs 0.1, 0.49, 0.51, 0.9 s against 0.5 s: the client could move the p99 (0.89 s) by 5%, 44 ms,
    # so 0.49 and 0.51 may lie on either side of the limit: ambiguous, counted as missed.
    measured = round_goodput(_round(tmp_path, [0.1, 0.49, 0.51, 0.9], 0.05), {"ttft": 0.5})
    assert (measured.completed, measured.met, measured.ambiguous) == (4, 1, 2)
    assert measured.lower_req_s == pytest.approx(1 / 40) and measured.upper_req_s == pytest.approx(3 / 40)
    assert measured.margins_s["ttft"] == pytest.approx(0.05 * float(np.quantile([0.1, 0.49, 0.51, 0.9], 0.99)))


def test_a_round_whose_client_could_not_bound_its_latency_meets_nothing_for_sure(tmp_path):
    measured = round_goodput(_round(tmp_path, [0.1, 0.2], None), {"ttft": 0.5})
    assert (measured.met, measured.ambiguous) == (0, 2)
    assert measured.figure == pytest.approx(0.5 / 20)  # half a request: below any round that met one


def test_a_boots_goodput_reads_its_usable_rounds_only(tmp_path):
    good = _round(tmp_path, [0.1, 0.2], 0.01)
    bad = good.model_copy(update={"problems": ["client INVALID"]})
    entry = BootEntry(index=0, block=2, arm="a", spec="", control=False, attempt=1, rounds=[{"prose-c1": good}, {"prose-c1": bad}])
    assert goodput_boots([entry], "prose-c1", {"ttft": 0.5}) == {"a": {2: [pytest.approx(2 / 20)]}}


class GoodputRacer(Racer):
    """The race's own loop and rule over simulated boots whose requests are written to disk: a
    decode step the token delay's milliseconds longer, 3% boot noise, the client bound at 1%."""

    def boot(self, index: int, block: int, name: str, label: str) -> BootEntry:
        rng = np.random.default_rng(2000 + index)
        delay_ms = float(self.plan.by_name()[name].env["RIG_TOKEN_DELAY_MS"])
        step = (0.006 + delay_ms / 1000) * math.exp(rng.normal(0, 0.03))
        records = simulate_round(rng, step, TTFT_S, 20.0)
        result, _ = round_result(records, 20.0, None)
        run = self.out / "runs" / f"{index:02d}-{name}"
        run.mkdir(parents=True)
        (run / "records-p.jsonl").write_text("".join(r.to_line() + "\n" for r in records))
        bounds = {f"{q}_p{p}_ms": 0.01 for q in ("ttft", "tpot", "e2e") for p in (50, 99)}
        result = result.model_copy(update={"dir": str(run), "client_bounds": bounds})
        entry = BootEntry(index=index, block=block, arm=name, spec=self.arm_of[name].spec, control=False, attempt=1,
                          rounds=[{"prose-c1": result}], phases_s={"up": 10.0, "load": 20.0})
        entry.write(self.out)
        self.state.entries.append(entry)
        return entry


def test_a_race_on_goodput_drops_the_slower_candidates_and_says_how_goodput_was_read(tmp_path):
    space = load_space(SPACE, "tiny-cpu", "prose-c1", "base-d0", goodput="ttft:1000,e2el:2000")
    plan = RacePlan(recipe="tiny-cpu", scenario="prose-c1", space=str(SPACE), candidates=space.candidates, baseline_given=True,
                    constraints=space.constraints, objective=OBJECTIVE, slos=space.slos, higher_is_better=True, max_rounds=4,
                    max_boots=32, margin_pct=0.3, alpha=0.05, rounds=1, small=True, duration_s=20.0)
    state = GoodputRacer(plan, tmp_path, progress=False, steps=False, port=None).run()
    result, text = write(tmp_path, plan, state)
    assert result.winner.endswith("-d0") and {"base-d3", "idle-d3"} <= set(state.eliminated)
    assert not any(name.endswith("-d0") for name in state.eliminated)
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert saved["objective"] == OBJECTIVE and any("counts as missing it" in note for note in saved["notes"])
    assert text.startswith(f"tune: {result.winner} wins")


def _goodput_race(out: Path) -> RacePlan:
    space = load_space(SPACE, "tiny-cpu", "prose-c1", "base-d0", goodput="ttft:1000,e2el:2000")
    plan = RacePlan(recipe="tiny-cpu", scenario="prose-c1", space=str(SPACE), candidates=space.candidates, baseline_given=True,
                    constraints=space.constraints, objective=OBJECTIVE, slos=space.slos, higher_is_better=True, max_rounds=4,
                    max_boots=32, margin_pct=0.3, alpha=0.05, rounds=1, small=True, duration_s=20.0)
    plan.write(out)
    write(out, plan, GoodputRacer(plan, out, progress=False, steps=False, port=None).run())
    return plan


def test_a_goodput_race_recomputes_from_evidence_that_carries_its_runs(tmp_path):
    """Packed as evidence (boots, race.json, looks.json, tune.json and runs/ with the records) and
    unpacked elsewhere, the race replays to the figures it wrote: every round read below the
    evidence's runs/, whatever path the racing host wrote."""
    import shutil
    import tarfile

    from rig.validation.evidence import unpack
    from rig.validation.races import RaceKind

    _goodput_race(tmp_path / "raced")
    archive = tmp_path / "race.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tmp_path / "raced", arcname=".")
    shutil.rmtree(tmp_path / "raced")  # the racing host is gone: only the evidence is left
    unpack(archive, tmp_path / "evidence", "race.tar.xz")
    figures = RaceKind().compute(tmp_path / "evidence")
    saved = json.loads((tmp_path / "evidence" / "tune.json").read_text())
    assert figures["winner"] == saved["winner"] and figures["winner"].endswith("-d0")
    assert figures["tune.json as written"] == figures["looks.json as written"] == "the replay's"


@pytest.mark.parametrize("elsewhere", ["/etc", "{race}/runs/../boots", "{race}/runs/99-none"])
def test_a_goodput_round_outside_the_evidences_runs_is_damaged_evidence(tmp_path, elsewhere):
    from rig.errors import Damaged
    from rig.validation.races import RaceKind

    _goodput_race(tmp_path)
    path = sorted((tmp_path / "boots").glob("*.json"))[0]
    data = json.loads(path.read_text())
    data["rounds"][0]["prose-c1"]["dir"] = elsewhere.format(race=tmp_path)
    path.write_text(json.dumps(data))
    with pytest.raises(Damaged) as refused:
        RaceKind().compute(tmp_path)
    assert refused.value.where == str(path) and refused.value.field == "rounds.0.prose-c1.dir" and refused.value.fix


def test_a_round_whose_records_are_gone_is_refused_not_read_as_meeting_nothing(tmp_path):
    from rig.errors import NotFound

    result = _round(tmp_path, [0.1, 0.2], 0.01)
    for path in Path(result.dir).iterdir():
        path.unlink()
    Path(result.dir).rmdir()
    with pytest.raises(NotFound) as refused:
        round_goodput(result, {"ttft": 0.5})
    assert refused.value.where == result.dir and refused.value.fix
