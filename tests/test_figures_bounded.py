"""Every number rig reads back or imports is finite and bounded where it is read (rig.typed's Epoch,
Seconds, Tokens, Count, Finite, and the backstop every stored shape holds to): a window that ends at
1e308, a request that ends before it starts, a token count of 1e300, a dimension written as text are
each refused as a kind, in one line naming the file and the field, never a crash or a figure of 1e299."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import aiperf_row, synthetic_run

from rig.errors import Damaged, Invalid, RigError
from rig.typed import MAX_MAGNITUDE, MAX_TOKENS


def _one_line(error: RigError, where: Path, field: str) -> None:
    assert "\n" not in str(error)
    assert error.where == str(where) and field in error.field, (error.where, error.field)


def _summary(run: Path, change) -> None:
    data = json.loads((run / "summary.json").read_text())
    change(data["metrics"]["window"])
    (run / "summary.json").write_text(json.dumps(data))


@pytest.mark.parametrize("end", [1e308, 2.2e11, 1.0])  # past any float product; past datetime's years; before the start
def test_a_summary_window_beyond_time_is_refused_by_export(tmp_path, end):
    from rig.load.peers import export_run

    run = tmp_path / "run"
    synthetic_run(run)
    _summary(run, lambda window: window.update(end=end))
    for fmt in ("vllm", "aiperf"):
        with pytest.raises(Damaged) as refused:
            export_run(run, fmt)
        _one_line(refused.value, run / "summary.json", "metrics.window")


def _aiperf(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(aiperf_row(**changes)) + "\n")
    return path


AIPERF_FAULTS = {
    "a request that ends before it starts": ({"request_end_ns": 1_600_000_000_000_000_000}, "metadata.request_end_ns"),
    "a token count of 1e300": ({"output_sequence_length": 1e300}, "metrics"),
    "a token count of 10^300": ({"output_sequence_length": 10**300}, "metrics"),
    "a token count above the bound": ({"output_sequence_length": MAX_TOKENS + 1}, "metrics"),
    "a figure of 1e300": ({"time_to_first_token": 1e300}, "metrics"),
    "a start past the year 5000": ({"request_start_ns": 10**30}, "metadata.request_start_ns"),
}


@pytest.mark.parametrize("case", sorted(AIPERF_FAULTS))
def test_an_aiperf_record_out_of_bounds_is_refused_on_import(tmp_path, case):
    from rig.load.peers import import_file

    changes, field = AIPERF_FAULTS[case]
    path = _aiperf(tmp_path, **changes)
    with pytest.raises(Invalid) as refused:
        import_file(path, None, tmp_path / "out", progress=False)
    _one_line(refused.value, path, field)
    assert not (tmp_path / "out").exists()


def test_an_aiperf_record_in_bounds_imports_with_its_tokens(tmp_path):
    from rig.load.peers import import_file

    imported = import_file(_aiperf(tmp_path), None, tmp_path / "out", progress=False)
    assert imported.summary.metrics.requests.completed == 1 and not imported.summary.problems()


RECORD_FAULTS = {
    "a token count of 10^300": ("usage", {"completion_tokens": 10**300, "prompt_tokens": 4}),
    "a token count above the bound": ("usage", {"completion_tokens": MAX_TOKENS + 1, "prompt_tokens": 4}),
    "a chunk token count of 10^300": ("chunk_tokens", [10**300]),
    "an end before the send": ("t_end", 1.0),
    "a status beyond any number": ("status", 10**300),
}


@pytest.mark.parametrize("case", sorted(RECORD_FAULTS))
def test_a_stored_record_out_of_bounds_is_refused_where_it_is_read(tmp_path, case):
    from rig.load.records import read_records

    field, value = RECORD_FAULTS[case]
    run = tmp_path / "run"
    synthetic_run(run)
    lines = (run / "records-p.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = value
    (run / "records-p.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(Damaged) as refused:
        read_records(run)
    assert "\n" not in str(refused.value) and refused.value.where.startswith(str(run / "records-p.jsonl"))


def test_any_number_of_a_stored_shape_beyond_the_backstop_is_refused_naming_its_field(tmp_path):
    """A field typed only `float` (a rate, a share) is held to MAX_MAGNITUDE all the same."""
    from rig.load.summary import RunSummary

    run = tmp_path / "run"
    synthetic_run(run)
    data = json.loads((run / "summary.json").read_text())
    data["metrics"]["output_tok_s"] = MAX_MAGNITUDE * 10
    (run / "summary.json").write_text(json.dumps(data))
    with pytest.raises(Damaged) as refused:
        RunSummary.read(run)
    assert refused.value.field == "metrics.output_tok_s" and "\n" not in str(refused.value)


@pytest.mark.parametrize(("config", "field"), [({"hidden_size": "4096", "num_attention_heads": 32}, "hidden_size"),
                                               ({"hidden_size": 4096, "num_attention_heads": "32"}, "num_attention_heads"),
                                               ({"text_config": {"hidden_size": "4096", "num_attention_heads": 32}}, "hidden_size"),
                                               ({"hidden_size": 1e300, "num_attention_heads": 32}, "hidden_size"),
                                               ({"hidden_size": 4096, "vocab_size": MAX_TOKENS + 1}, "vocab_size")])
def test_a_config_json_dimension_that_is_not_a_whole_number_is_refused_by_audit(tmp_path, config, field):
    from rig.audit.shapes import load_dims

    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(Invalid) as refused:
        load_dims(None, str(tmp_path))
    _one_line(refused.value, tmp_path / "config.json", field)


def test_a_config_json_without_head_dim_derives_it_after_validation(tmp_path):
    from rig.audit.shapes import load_dims

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32}))
    dims, _ = load_dims(None, str(tmp_path))
    assert dims.head_dim == 128


def test_a_peer_file_over_the_import_cap_is_refused_before_it_is_read(tmp_path):
    """The cap bounds the import's work (about 13 times the file's size in memory: benchmarks/peer_import.py),
    so a larger file is refused by its size, unread."""
    import os

    from rig.load.peers import MAX_PEER_EXPORT_BYTES, import_file

    path = tmp_path / "profile_export.jsonl"
    path.touch()
    os.truncate(path, MAX_PEER_EXPORT_BYTES + 1)  # sparse: nothing is written, nothing would be read
    with pytest.raises(Damaged) as refused:
        import_file(path, None, tmp_path / "out", progress=False)
    assert refused.value.field == "(file)" and "\n" not in str(refused.value) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("figures", [{"user_decode_tok_s": 1e300}, {"user_decode_tok_s": -1e300},
                                     {"a": None, "user_decode_tok_s": 1e300}])
def test_a_comparison_entry_with_a_figure_beyond_the_backstop_is_damaged(tmp_path, figures):
    """A resumed comparison reads its entries back: a figure of 1e300 is refused (and the boot redone),
    never averaged into the comparison."""
    from rig.compare.model import BootEntry, RunResult

    entry = BootEntry(index=0, block=0, arm="a", spec="a:X=0", control=False, attempt=1,
                      rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 1.0}, problems=[])}])
    entry.write(tmp_path)
    path = BootEntry.path(tmp_path, 0, "a")
    data = json.loads(path.read_text())
    data["rounds"][0]["prose-c1"]["figures"] = figures
    path.write_text(json.dumps(data))
    with pytest.raises(Damaged) as refused:
        BootEntry.read(path)
    assert refused.value.field == "rounds.0.prose-c1.figures" and "\n" not in str(refused.value)
