"""The space file: candidates resolved through the recipe before any boot, one line per bad space."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from rig.errors import RigError
from rig.tune.space import load_space

EXAMPLE = REPO / "recipes" / "spaces" / "tiny-cpu-token-delay.yaml"


def _space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_the_example_space_crosses_its_axes_and_puts_the_baseline_first():
    space = load_space(EXAMPLE, "tiny-cpu", "prose-c1", "idle-d2")
    names = [c.name for c in space.candidates]
    assert names[0] == "idle-d2" and sorted(names) == sorted(f"{a}-d{d}" for a in ("base", "idle") for d in range(4))
    idle = next(c for c in space.candidates if c.name == "idle-d1")
    assert idle.server_args == ["--model-timeout", "600"] and idle.env == {"RIG_TOKEN_DELAY_MS": "1"}


SHIPPED = sorted((REPO / "recipes" / "spaces").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_space_resolves_with_the_command_it_shows(path):
    """Each shipped space says in its header how it is raced (`rig tune RECIPE --space ...`): that
    command's candidates resolve against the recipe and the engine's argument grammar."""
    import shlex

    lines = [line.strip("# ").strip() for line in path.read_text().splitlines() if "rig tune " in line]
    assert lines, f"{path.name}: no `rig tune` line in its header"
    words = shlex.split(lines[0])
    option = dict(zip(words, words[1:]))
    assert option["--space"] == f"recipes/spaces/{path.name}"
    space = load_space(path, words[2], option["--scenario"], option.get("--baseline"))
    assert len(space.candidates) >= 2 and (option.get("--baseline") in (None, space.candidates[0].name))


@pytest.mark.parametrize("text,field", [
    ("variants: [nope]\nenv: {a: {X: '1'}, b: {X: '2'}}\n", "variants.nope"),
    ("env: {a: {RIG_TOKEN_DELAY_MS: '1'}}\n", "(top level)"),  # one candidate
    ("env: {A: {X: '1'}, b: {X: '2'}}\n", "env.A"),
    ("server_args: {a: [], b: [--port, '9']}\n", "candidate b: server_args"),
    ("env: {a: {X: '1'}, b: {X: '2'}}\nconstraints: {gpu_temp: 80}\n", "constraints.gpu_temp"),
    ("env: {a: {X: '1'}, b: {X: '2'}}\nconstraints: {ttft_p99_ms: -1}\n", "constraints.ttft_p99_ms"),
    ("env: {a: {X: '1'}, b: {X: '2'}}\nconstraints: {greedy_identical: true}\n", "constraints.greedy_identical"),
    ("env: {a: {RIG_TOKEN_DELAY_MS: 'x'}, b: {X: '2'}}\n", "candidate a"),
    ("envs: {a: {X: '1'}}\n", "envs"),
    ("env: {a: {X: '1'}, b: {X: '2'}}\nconstraints: {mean_abs_dlogprob: 0.05}\n", "constraints.mean_abs_dlogprob"),
])
def test_a_bad_space_is_refused_in_one_line_naming_the_file_and_field(tmp_path, text, field):
    path = _space(tmp_path, text)
    with pytest.raises(RigError) as refused:
        load_space(path, "tiny-cpu", "prose-c1")
    assert refused.value.where == str(path) and refused.value.field.startswith(field), str(refused.value)
    assert "\n" not in str(refused.value) and refused.value.fix


def test_an_inter_token_bound_is_refused_for_a_scenario_of_one_token(tmp_path):
    path = _space(tmp_path, "env: {a: {X: '1'}, b: {X: '2'}}\nconstraints: {itl_p99_ms: 50}\n")
    with pytest.raises(RigError) as refused:
        load_space(path, "tiny-cpu", "prefill-8k")
    assert refused.value.field == "constraints.itl_p99_ms"


def test_a_boot_budget_that_cannot_reach_the_first_look_is_refused_before_anything_runs(tmp_path, capsys):
    from rig.cli import main
    from rig.exits import Exit

    code = main(["tune", "tiny-cpu", "--space", str(EXAMPLE), "--scenario", "prose-c1", "--max-boots", "20",
                 "--out", str(tmp_path / "race")])
    error = capsys.readouterr().err
    assert code == Exit.BAD_INPUT and "--max-boots" in error and "24 or more" in error
    assert not (tmp_path / "race").exists()


def test_a_race_directory_is_resumed_only_with_resume_and_only_by_the_same_race(tmp_path, capsys):
    from rig.cli import main
    from rig.exits import Exit
    from rig.tune.plan import RacePlan

    out = tmp_path / "race"
    out.mkdir()
    space = load_space(EXAMPLE, "tiny-cpu", "prose-c1", "base-d0")
    RacePlan(recipe="tiny-cpu", scenario="prose-c1", space=str(EXAMPLE), candidates=space.candidates, baseline_given=True,
             constraints=space.constraints, objective="user_decode_tok_s", higher_is_better=True, max_rounds=5, max_boots=40,
             margin_pct=0.3, alpha=0.05, rounds=2, small=True).write(out)
    command = ["tune", "tiny-cpu", "--space", str(EXAMPLE), "--scenario", "prose-c1", "--baseline", "base-d0", "--out", str(out)]
    assert main(command) == Exit.BAD_INPUT and "already holds a race" in capsys.readouterr().err
    assert main([*command, "--resume"]) == Exit.BAD_INPUT and "another race" in capsys.readouterr().err  # 6 rounds, not 5


def _one_token_when_small(tmp_path: Path) -> str:
    """prose-c1 whose small size asks for one token per request."""
    text = (REPO / "loadtests" / "scenarios" / "prose-c1.yaml").read_text()
    path = tmp_path / "prose-c1.yaml"
    path.write_text(text.replace("small: {max_tokens: 32", "small: {max_tokens: 1"))
    return str(path)


def test_constraints_are_checked_against_the_scenario_at_the_races_size(tmp_path):
    scenario = _one_token_when_small(tmp_path)
    path = _space(tmp_path, "env: {a: {X: '1'}, b: {X: '2'}}\nconstraints: {itl_p50_ms: 50}\n")
    assert load_space(path, "tiny-cpu", scenario, small=False).constraints.latency == {"itl_p50_ms": 50.0}
    with pytest.raises(RigError) as refused:
        load_space(path, "tiny-cpu", scenario, small=True)
    assert refused.value.where == str(path) and refused.value.field == "constraints.itl_p50_ms"


def test_a_headline_the_scenario_cannot_give_at_the_races_size_is_refused(tmp_path):
    path = _space(tmp_path, "env: {a: {X: '1'}, b: {X: '2'}}\n")
    with pytest.raises(RigError) as refused:
        load_space(path, "tiny-cpu", _one_token_when_small(tmp_path), small=True)
    assert refused.value.field == "--scenario" and "goodput" in refused.value.fix
    assert load_space(path, "tiny-cpu", _one_token_when_small(tmp_path), small=True, goodput="ttft:500").slos == {"ttft": 0.5}


@pytest.mark.parametrize("extra", [["--goodput", "tpot:50"], ["--goodput", "itl:5"]])
def test_an_slo_is_refused_before_the_race_has_a_directory(tmp_path, capsys, extra):
    from rig.cli import main
    from rig.exits import Exit

    code = main(["tune", "tiny-cpu", "--space", str(EXAMPLE), "--scenario", "prefill-8k", *extra, "--out", str(tmp_path / "race")])
    error = capsys.readouterr().err
    assert code == Exit.BAD_INPUT and "--goodput" in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "race").exists()


def test_tune_help_shows_the_space_format(capsys):
    from rig.cli import main

    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for part in ("server_args:", "env:", "constraints:", "goodput:", "--goodput", "ttft:2000,tpot:50", "ttft<=2s", "e2el"):
        assert part in shown, part


@pytest.mark.parametrize("text,fix", [
    ("envs: {a: {X: '1'}, b: {X: '2'}}\n", "did you mean env:?"),
    ("server_arg: {a: [], b: [--enforce-eager]}\n", "did you mean server_args:?"),
    ("env: {a: {RIG_TOKEN_DELAY_MS: 0}, b: {RIG_TOKEN_DELAY_MS: '1'}}\n", "quote the value as you wrote it"),
    ("env: {a: {X: true}, b: {X: '1'}}\n", "quote the value as you wrote it"),
    ("env: {a: {X: 0x10}, b: {X: '1'}}\n", "quote the value as you wrote it"),
    ("whatever: 1\n", "the keys are variants, server_args, env, constraints, goodput"),
])
def test_a_space_written_the_natural_wrong_way_gets_the_fix_that_undoes_it(tmp_path, text, fix):
    with pytest.raises(RigError) as refused:
        load_space(_space(tmp_path, text), "tiny-cpu", "prose-c1")
    assert refused.value.fix.startswith(fix), refused.value.fix


def test_a_shipped_space_named_without_its_folder_is_pointed_at(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RigError) as refused:
        load_space(Path("tiny-cpu-first-race.yaml"), "tiny-cpu", "prose-c1")
    assert refused.value.fix == "did you mean recipes/spaces/tiny-cpu-first-race.yaml?"
