"""Hostile scenario, trace and conversation files: each crafted input is refused with one
line naming the file and the field, before anything boots or is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import REPO, rig_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rig.errors import RigError
from rig.load.scenarios import MAX_USERS, load_scenario

BASE = yaml.safe_load((REPO / "loadtests" / "scenarios" / "prose-c1.yaml").read_text())
OPEN = yaml.safe_load((REPO / "loadtests" / "scenarios" / "open-loop.yaml").read_text())
TRACE = yaml.safe_load((REPO / "loadtests" / "scenarios" / "trace-replay.yaml").read_text())


SHIPPED_NAMES = {BASE["name"], OPEN["name"], TRACE["name"]}


def _write(tmp_path: Path, data: dict, name: str = "crafted") -> Path:
    """The document as `name`.yaml; a shipped scenario's own name becomes `name` (the file's stem)."""
    path = tmp_path / f"{name}.yaml"
    named = {**data, "name": name} if data.get("name") in SHIPPED_NAMES else data
    path.write_text(yaml.safe_dump(named, allow_unicode=True, sort_keys=False))
    return path


def _with(base: dict, **changes) -> dict:
    data = {**base, **changes}
    return {k: v for k, v in data.items() if v is not ...}


# case -> (document, field named in the message)
CRAFTED = {
    # types: no coercion, ever
    "users as string": (_with(BASE, users="1"), "users"),
    "users as float": (_with(BASE, users=1.0), "users"),
    "users as bool": (_with(BASE, users=True), "users"),
    "duration as string": (_with(BASE, duration_s="60"), "duration_s"),
    "temperature as bool": (_with(BASE, temperature=False), "temperature"),
    "distributed as yes-string": (_with(BASE, distributed="yes"), "distributed"),
    "prefix as list": (_with(BASE, prefix=[1, 2]), "prefix"),
    "unknown key": (_with(BASE, userz=3), "userz"),
    "a required key misspelled": (_with(BASE, max_tokens=..., max_token=32), "max_token"),  # named, not "max_tokens missing"
    "unknown nested key": (_with(OPEN, arrivals={"rate": 4, "burstyness": 1}), "arrivals.burstyness"),
    "schema missing": (_with(BASE, schema=...), "schema"),
    "schema from the future": (_with(BASE, schema=2), "schema"),
    "unknown kind": (_with(BASE, kind="closed"), "kind"),
    "unknown distribution": (_with(BASE, output_lengths={"distribution": "pareto"}), "output_lengths"),
    # bounds on every number
    "users 10^9": (_with(BASE, users=10**9), "users"),
    "users zero": (_with(BASE, users=0), "users"),
    "negative duration": (_with(BASE, duration_s=-5), "duration_s"),
    "zero duration": (_with(BASE, duration_s=0), "duration_s"),
    "a window of a millisecond": (_with(BASE, duration_s=0.001), "duration_s"),
    "prompt tokens 10^12": (_with(BASE, prompt_tokens=10**12), "prompt_tokens"),
    "max tokens zero": (_with(BASE, max_tokens=0), "max_tokens"),
    "temperature 50": (_with(BASE, temperature=50), "temperature"),
    "negative seed": (_with(BASE, seed=-1), "seed"),
    "read timeout a year": (_with(BASE, read_timeout_s=3.2e7), "read_timeout_s"),
    "negative rate": (_with(OPEN, arrivals={"rate": -1}), "arrivals.rate"),
    "rate 10^6": (_with(OPEN, arrivals={"rate": 1e6}), "arrivals.rate"),
    "rate x duration too many arrivals": (_with(OPEN, arrivals={"rate": 9000}, duration_s=86_400), "(top level)"),
    "zero burstiness": (_with(OPEN, arrivals={"rate": 1, "burstiness": 0}), "arrivals.burstiness"),
    "concurrency cap above the user bound": (_with(OPEN, arrivals={"rate": 1, "max_concurrency": MAX_USERS + 1}),
                                             "arrivals.max_concurrency"),
    "trace speed zero": (_with(TRACE, trace={"file": "mooncake-tiny", "speed": 0}), "trace.speed"),
    "uniform min above max": (_with(BASE, output_lengths={"distribution": "uniform", "min": 9, "max": 3}), "output_lengths.uniform"),
    "lognormal sigma 100": (_with(BASE, output_lengths={"distribution": "lognormal", "median": 10, "sigma": 100}),
                            "output_lengths.lognormal.sigma"),
    "small sets users 10^9": (_with(BASE, small={"users": 10**9}), "small: users"),
    "small sets an unknown key": (_with(BASE, small={"turbo": 1}), "(top level)"),
    # names and paths: nothing can leave results/ or loadtests/
    "name traverses": (_with(BASE, name="../../etc/x"), "name"),
    "name with slash": (_with(BASE, name="a/b"), "name"),
    "name absolute": (_with(BASE, name="/tmp/x"), "name"),
    "name uppercase": (_with(BASE, name="Prose"), "name"),
    "name too long": (_with(BASE, name="a" * 65), "name"),
    "prompt set traverses": (_with(BASE, prompt_set="../../../etc/passwd"), "prompt_set"),
    "prompt set with dot dot": (_with(BASE, prompt_set=".."), "prompt_set"),
    "prompt set absolute": (_with(BASE, prompt_set="/etc/hostname"), "prompt_set"),
    "prompt set missing": (_with(BASE, prompt_set="nosuchset"), "prompt_set"),
    "name with newline": (_with(BASE, name="a\nb"), "name"),  # the strict reader refuses it first, naming the field
    "name with bidi override": (_with(BASE, name="ab\u202ecd"), "name"),  # the strict reader refuses it first, naming the field
    "trace file not a name or jsonl": (_with(TRACE, trace={"file": "../../etc/passwd"}), "trace.file"),
    # sections that do not belong to the kind
    "arrivals on a closed loop": (_with(BASE, arrivals={"rate": 1}), "(top level)"),
    "open loop without arrivals": (_with(OPEN, arrivals=...), "(top level)"),
    "multi-turn on completions": (_with(BASE, kind="multi_turn", conversation={"turns": 2}, endpoint="completions"), "(top level)"),
    "trace lengths without a trace": (_with(BASE, output_lengths={"distribution": "trace"}), "(top level)"),
    "uniform above max_tokens": (_with(BASE, output_lengths={"distribution": "uniform", "min": 1, "max": 100_000}), "(top level)"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_scenario_is_refused_in_one_line(case, tmp_path):
    document, field = CRAFTED[case]
    path = _write(tmp_path, document)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    message = str(raised.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert raised.value.field.startswith(field) or field in raised.value.field, (raised.value.field, message)
    assert "fix:" in message
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


YAML_CASES = {
    "syntax error": ("schema: 1\nname: crafted\nusers: [1, 2\n", "line"),
    "tab indentation": ("schema: 1\nname: crafted\nprefix:\n\tshared_tokens: 3\n", "line"),
    "duplicate key": (yaml.safe_dump(BASE).replace("name: prose-c1", "name: crafted") + "users: 5\n", "line"),
    "alias bomb": ("a: &a [1, 1, 1]\nb: [*a, *a, *a]\n", "line"),
    "not a mapping": ("- 1\n- 2\n", "(top level)"),
    "not UTF-8": (b"schema: 1\nname: \xff\xfe\n", "line"),
    "octal-looking seed": (yaml.safe_dump(BASE).replace("name: prose-c1", "name: crafted").replace("seed: 1234", "seed: '017620'"), "seed"),
    "empty file": ("", "(top level)"),
}


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_malformed_yaml_is_one_line(case, tmp_path):
    text, field = YAML_CASES[case]
    path = tmp_path / "crafted.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert "\n" not in str(raised.value) and raised.value.field.startswith(field), str(raised.value)


def test_files_that_are_not_regular_are_never_read(tmp_path):
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "dir.yaml").mkdir()
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20))
    for name in ("zero", "fifo", "dir", "big", "absent"):
        with pytest.raises(RigError) as raised:
            load_scenario(str(tmp_path / f"{name}.yaml"))
        assert raised.value.field == "(file)", str(raised.value)


def test_scenario_references_on_the_command_line_are_names_or_yaml_paths():
    for ref in ("../prose-c1", "prose-c1/../../x", "nosuch", "PROSE"):
        with pytest.raises(RigError) as raised:
            load_scenario(ref)
        assert raised.value.where == "command line" and raised.value.field == "--scenario"


@pytest.mark.parametrize("ref", ["prose_c1", "prose-c2", "decode_c32"])
def test_a_misspelled_scenario_name_gets_the_name_it_is_close_to(ref):
    with pytest.raises(RigError) as raised:
        load_scenario(ref)
    assert raised.value.fix.startswith(f"did you mean {ref[:5].replace('_', '-')}")


def _trace(tmp_path: Path, rows: list, raw: str | None = None, block: int = 16) -> Path:
    (tmp_path / "rows.jsonl").write_text(raw if raw is not None else "".join(json.dumps(r) + "\n" for r in rows))
    scenario = {**TRACE, "name": "mine", "trace": {"file": "rows.jsonl", "block_tokens": block}}
    return _write(tmp_path, scenario, "mine")


ROW = {"timestamp": 0, "input_length": 20, "output_length": 5, "hash_ids": [1, 2]}
TRACE_CASES = {
    "duplicate key": ('{"timestamp": 0, "timestamp": 5, "input_length": 20, "output_length": 5, "hash_ids": [1, 2]}\n', "line 1"),
    "NaN timestamp": ('{"timestamp": NaN, "input_length": 20, "output_length": 5, "hash_ids": [1, 2]}\n', "line 1"),
    "not JSON": ("timestamp,input_length\n0,20\n", "line 1"),
    "string length": (json.dumps({**ROW, "input_length": "20"}) + "\n", "line 1: input_length"),
    "negative timestamp": (json.dumps({**ROW, "timestamp": -1}) + "\n", "line 1: timestamp"),
    "huge output": (json.dumps({**ROW, "output_length": 10**9}) + "\n", "line 1: output_length"),
    "extra key": (json.dumps({**ROW, "prompt": "x"}) + "\n", "line 1: prompt"),
    "hash ids do not fit the length": (json.dumps({**ROW, "hash_ids": [1]}) + "\n", "row 1: hash_ids"),
    "unsorted": (json.dumps({**ROW, "timestamp": 50}) + "\n" + json.dumps(ROW) + "\n", "row 2: timestamp"),
    "control character": (json.dumps({**ROW, "hash_ids": [1, 2], "timestamp": 0}).replace('"timestamp"', '"time\\u0007stamp"') + "\n", "line 1"),
    "empty": ("\n\n", "(file)"),
    "a depth bomb": ('{"timestamp": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "line 1"),
    "rows split by a vertical tab": (json.dumps(ROW) + "\x0b" + json.dumps(ROW) + "\n", "line 1"),
    "a timestamp past the longest run": (json.dumps({**ROW, "timestamp": 1e15}) + "\n", "line 1: timestamp"),
}


@pytest.mark.parametrize("case", sorted(TRACE_CASES))
def test_crafted_trace_is_refused_in_one_line(case, tmp_path):
    raw, field = TRACE_CASES[case]
    path = _trace(tmp_path, [], raw)
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert "\n" not in str(raised.value) and raised.value.where.endswith("rows.jsonl"), str(raised.value)
    assert raised.value.field.startswith(field), str(raised.value)


def test_a_speed_that_stretches_the_trace_past_a_day_is_refused_in_one_line(tmp_path):
    """1e-300 passed the speed's own bounds and broke Locust's run time (an integer overflow in its
    log, and a refusal that blamed the client)."""
    path = _trace(tmp_path, [ROW, {**ROW, "timestamp": 1000}])
    data = yaml.safe_load(path.read_text())
    data["trace"]["speed"] = 1.0e-300
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert raised.value.field == "trace.speed", str(raised.value)


def test_trace_symlinked_to_dev_zero_is_refused(tmp_path):
    path = _trace(tmp_path, [ROW])
    (tmp_path / "rows.jsonl").unlink()
    (tmp_path / "rows.jsonl").symlink_to("/dev/zero")
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert raised.value.field == "(file)" and "regular" in raised.value.problem


def test_ten_million_lines_are_refused_before_they_are_parsed(tmp_path):
    path = _trace(tmp_path, [ROW])
    (tmp_path / "rows.jsonl").write_bytes(b"{}\n" * 10_000_000)
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert raised.value.field == "(file)" and "more than 100000 rows" in raised.value.problem


def test_a_trace_larger_than_its_cap_is_refused_unread(tmp_path):
    path = _trace(tmp_path, [ROW])
    with open(tmp_path / "rows.jsonl", "r+b") as handle:  # sparse: 3 GB on paper, nothing on disk
        handle.truncate(3 << 30)
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert raised.value.field == "(file)" and "larger than" in raised.value.problem


def test_a_sparse_multi_gigabyte_prompt_set_is_refused_unread(tmp_path, monkeypatch):
    from rig.load import prompts

    (tmp_path / "huge.txt").touch()
    os.truncate(tmp_path / "huge.txt", 3 << 30)
    monkeypatch.setattr(prompts, "PROMPT_DIR", tmp_path)
    with pytest.raises(RigError) as raised:
        prompts.prompt_set_text("huge")
    assert raised.value.field == "(file)" and "larger than" in raised.value.problem
    os.mkfifo(tmp_path / "fifo.txt")
    with pytest.raises(RigError) as raised:
        prompts.prompt_set_text("fifo")  # no hang
    assert "regular" in raised.value.problem


def test_a_conversation_file_that_is_a_fifo_is_refused_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "chats.jsonl")
    base = yaml.safe_load((REPO / "loadtests" / "scenarios" / "chat-sharegpt.yaml").read_text())
    path = _write(tmp_path, {**base, "name": "mine", "conversation": {"turns": 2, "file": "chats.jsonl"}}, "mine")
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert raised.value.field == "(file)" and "regular" in raised.value.problem


CONVERSATION_CASES = {
    "starts with gpt": ({"id": "a", "conversations": [{"from": "gpt", "value": "hi"}, {"from": "human", "value": "x"}]}, "line 1: conversations"),
    "two humans in a row": ({"id": "a", "conversations": [{"from": "human", "value": "x"}, {"from": "human", "value": "y"}]}, "line 1"),
    "unknown sender": ({"id": "a", "conversations": [{"from": "bot", "value": "x"}, {"from": "gpt", "value": "y"}]}, "line 1"),
    "value not a string": ({"id": "a", "conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "y"}]}, "line 1"),
    "too many turns": ({"id": "a", "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}] * 100}, "line 1"),
    "a depth bomb in a turn": ({"id": "a", "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}],
                                "extra": "@@BOMB@@"}, "line 1"),
    "bidi override in text": ({"id": "a", "conversations": [{"from": "human", "value": "x\u202e"}, {"from": "gpt", "value": "y"}]}, "line 1"),
}


@pytest.mark.parametrize("case", sorted(CONVERSATION_CASES))
def test_crafted_conversation_file_is_refused_in_one_line(case, tmp_path):
    row, field = CONVERSATION_CASES[case]
    (tmp_path / "chats.jsonl").write_text(json.dumps(row).replace('"@@BOMB@@"', "[" * 100_000 + "]" * 100_000) + "\n")
    base = yaml.safe_load((REPO / "loadtests" / "scenarios" / "chat-sharegpt.yaml").read_text())
    path = _write(tmp_path, {**base, "name": "mine", "conversation": {"turns": 2, "file": "chats.jsonl"}}, "mine")
    with pytest.raises(RigError) as raised:
        load_scenario(str(path))
    assert "\n" not in str(raised.value) and raised.value.where.endswith("chats.jsonl"), str(raised.value)
    assert raised.value.field.startswith(field), str(raised.value)


def test_a_multiline_conversation_text_is_fine(tmp_path):
    row = {"id": "a", "conversations": [{"from": "human", "value": "line one\nline two\twith a tab"}, {"from": "gpt", "value": "ok"}]}
    (tmp_path / "chats.jsonl").write_text(json.dumps(row) + "\n")
    base = yaml.safe_load((REPO / "loadtests" / "scenarios" / "chat-sharegpt.yaml").read_text())
    path = _write(tmp_path, {**base, "name": "mine", "conversation": {"turns": 2, "file": "chats.jsonl"}}, "mine")
    assert load_scenario(str(path)).conversation.turns == 2


def test_the_cli_refuses_a_bad_scenario_before_booting_or_writing(tmp_path):
    (tmp_path / "in").mkdir()
    bad = _write(tmp_path / "in", _with(BASE, users=10**9), "bad")
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    for args in (["loadtest", "tiny-cpu", "--scenario", str(bad)],
                 ["loadtest", "tiny-cpu", "--scenario", "prose-c1", "--duration", "-3"],
                 ["loadtest", "tiny-cpu", "--scenario", "../../etc/passwd"],
                 ["sweep", "tiny-cpu", "--scenario", str(bad), "--concurrency", "1,2"],
                 ["compare", "tiny-cpu", "--arm", "a:RIG_TOKEN_DELAY_MS=0", "--arm", "b:RIG_TOKEN_DELAY_MS=1", "--scenario", str(bad)]):
        result = rig_main(*args, env=env, timeout=120)
        assert result.returncode == 2, (args, result.stdout[-500:], result.stderr[-1500:])
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rig: "), result.stderr
        assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists(), args


SCALARS = st.one_of(st.text(max_size=40), st.integers(min_value=-(10**15), max_value=10**15), st.floats(allow_nan=True),
                    st.booleans(), st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=10), inner, max_size=3)), max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted({*BASE, *OPEN, *TRACE, "arrivals", "trace", "conversation", "output_lengths"})), value=VALUES,
       base=st.sampled_from([BASE, OPEN, TRACE]))
def test_random_values_in_any_field_give_a_rig_error_or_a_valid_scenario(tmp_path, field, value, base):
    """Whatever a field holds, loading gives a valid scenario or one RigError line: no traceback,
    and nothing is written anywhere."""
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump({**base, "name": "fuzz", field: value}, allow_unicode=True))
    before = sorted(p.name for p in tmp_path.iterdir())
    try:
        scenario = load_scenario(str(path))
    except RigError as error:
        assert "\n" not in str(error)
    else:
        assert scenario.name == "fuzz" and 1 <= scenario.pool <= MAX_USERS
    assert sorted(p.name for p in tmp_path.iterdir()) == before
