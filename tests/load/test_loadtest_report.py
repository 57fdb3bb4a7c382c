"""What `rig loadtest` prints: the series' answer first, a brief table of the figures a reader looks
at (every column in summary.md and with --verbose), and in the default series a run only the client
could not measure named as skipped, not failed. Synthetic runs: no server, no Locust."""

from __future__ import annotations

from conftest import synthetic_run

from rig.load.report import BRIEF, COLUMNS, brief_notes, markdown_table
from rig.load.summary import ClientBound, RunSummary
from rig.loadrun.command import client_only, verdict


def _run(tmp_path, name: str, client_bound: float | None = None, error_rate: bool = False) -> RunSummary:
    synthetic_run(tmp_path / name)
    summary = RunSummary.read(tmp_path / name)
    summary = summary.model_copy(update={"scenario": summary.scenario.model_copy(update={"name": name})})
    if client_bound is not None:
        bound = ClientBound(bound=client_bound, limit=0.05, holds=client_bound <= 0.05, reason="lag")
        client = summary.client.model_copy(update={
            "valid": bound.holds, "reasons": [] if bound.holds else ["user_decode_tok_s: the client's timing could move it"],
            "figures": {"user_decode_tok_s": bound}})
        summary = summary.model_copy(update={"client": client})
    if error_rate:
        requests = summary.metrics.requests.model_copy(update={"errors": {"http_500": 5}, "error_rate": 0.5})
        summary = summary.model_copy(update={"metrics": summary.metrics.model_copy(update={"requests": requests})})
    return summary


def test_the_brief_table_shows_the_figures_a_reader_looks_at_and_the_full_one_every_column(tmp_path):
    run = _run(tmp_path, "prose-c1")
    brief_header = markdown_table([run], brief=True).splitlines()[0]
    full_header = markdown_table([run]).splitlines()[0]
    assert [c.strip() for c in brief_header.strip("|").split("|")] == list(BRIEF)
    assert [c.strip() for c in full_header.strip("|").split("|")] == [name for name, _ in COLUMNS]
    assert len(BRIEF) <= 10 < len(COLUMNS)


def test_a_run_only_the_client_could_not_measure_is_named_with_its_bound(tmp_path):
    small_box = _run(tmp_path, "c3000", client_bound=0.052)
    assert client_only(small_box) == "the client's timing could move user_decode_tok_s by 5.2% > 5%"
    assert client_only(_run(tmp_path, "prose-c1", client_bound=0.01)) is None  # usable
    assert client_only(_run(tmp_path, "code-c1", client_bound=0.052, error_rate=True)) is None  # failed requests too: not skipped
    assert brief_notes(small_box) == [f"c3000: not usable: {small_box.problems()[0]}"]


def test_the_series_answer_names_usable_failed_and_skipped_runs(tmp_path):
    usable, skipped, failed = _run(tmp_path, "prose-c1"), _run(tmp_path, "c3000", client_bound=0.052), \
        _run(tmp_path, "code-c1", error_rate=True)
    line = verdict([usable, skipped], {"c3000": client_only(skipped)})
    assert line == ("loadtest: usable: prose-c1; skipped: c3000: this machine cannot measure it (the client's timing could "
                    "move user_decode_tok_s by 5.2% > 5%; `--scenario c3000` runs it alone and reports it INVALID)")
    assert verdict([usable, failed], {}) == "loadtest: usable: prose-c1; NOT USABLE: code-c1 (the notes say why)"
