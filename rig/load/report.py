"""Load-test output: summary.json (schema-versioned, with provenance), summary.csv, summary.md."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rig.atomic import write_text_atomic
from rig.load.client_error import share_text
from rig.load.figures import (
    BY_COLUMN,
    E2E_P50,
    HEADLINE,
    ITL_P50,
    OUTPUT,
    PREFILL,
    TPOT_P50,
    TTFT_P50,
    TTFT_P99,
    USER_DECODE,
    Figure,
)
from rig.load.summary import RunSummary
from rig.load.wire import LAG_PROBE_SLEEP


def _figure(figure: Figure) -> tuple[str, Callable[[RunSummary], Any]]:
    """A figure's column: its label and its value in a run (rig.load.figures)."""
    return str(figure.column), lambda summary: figure.read(summary.metrics)


COLUMNS: list[tuple[str, Callable[[RunSummary], Any]]] = [
    ("scenario", lambda s: s.name + (" (warmup)" if s.warmup else "")),
    ("users", lambda s: s.scenario.users),
    ("done", lambda s: s.metrics.requests.completed),
    ("errors", lambda s: sum(n for k, n in s.metrics.requests.errors.items() if k != "cut_by_window")),
    ("cut", lambda s: s.metrics.requests.cut_by_window),
    _figure(USER_DECODE),
    ("user p50", lambda s: s.metrics.user_decode_tok_s.p50),
    ("user p10", lambda s: s.metrics.user_decode_tok_s.p10),
    _figure(OUTPUT),
    _figure(PREFILL),
    _figure(TTFT_P50),
    _figure(TTFT_P99),
    _figure(ITL_P50),
    _figure(TPOT_P50),
    _figure(E2E_P50),  # the headline of open loops, traces and conversations
    ("window s", lambda s: f"{s.metrics.window.seconds:.1f} ({100 * s.metrics.window.kept_fraction:.0f}%)"),
    ("cached", lambda s: None if s.metrics.tokens.cached_share is None else f"{100 * s.metrics.tokens.cached_share:.0f}%"),
    ("usable", lambda s: usable_text(s)),
]


def usable_text(summary: RunSummary) -> str:
    """The full table's usable cell: every reason a run may not be used."""
    return "warmup" if summary.warmup else ("yes" if not summary.problems() else "NO: " + "; ".join(summary.problems()))


# The column each client-bounded figure is printed in: a cell whose bound fails is marked in the table.
COLUMN_FIGURES = {column: BY_COLUMN[column].name for column, _ in COLUMNS if column in BY_COLUMN}
UNBOUND_MARK = " (client)"
UNBOUND_LEGEND = (f"{UNBOUND_MARK.strip()}: the client's own timing could move this figure beyond its limit, so it is not "
                  "usable. The usable column is about the run's headline (" + ", ".join(
                      f"{figure.column}: {' or '.join(k.replace('_', ' ') for k in figure.headline_of)}"
                      for figure in dict.fromkeys(HEADLINE.values())) + " scenarios)")
TOKEN_AGREEMENT_LIMIT = 0.02  # the client's output tokens and the server's counter, further apart than this: named


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def row(summary: RunSummary) -> list[Any]:
    return [get(summary) for _, get in COLUMNS]


def _cells(summary: RunSummary) -> list[str]:
    """The row as printed: a figure the client's timing could move beyond its limit is marked."""
    figures = summary.client.figures
    cells = []
    for (name, _), value in zip(COLUMNS, row(summary), strict=True):
        bound = figures.get(COLUMN_FIGURES.get(name, ""))
        cells.append(_fmt(value) + (UNBOUND_MARK if bound is not None and not bound.holds and value is not None else ""))
    return cells


# The figures a reader looks at first: what ran, the decode speed per user and in total, time to
# first token, time per output token, a request's whole time (open loops' headline), and whether the
# run may be used. Every column is in summary.md, summary.csv and `--verbose`.
BRIEF = ("scenario", "users", "done", "errors", "user tok/s", "output tok/s", "TTFT p50 ms", "TPOT p50 ms", "E2E p50 ms",
         "usable")


def brief_usable(summary: RunSummary) -> str:
    """The brief table's usable cell: why not is a note below it (brief_notes)."""
    return "warmup" if summary.warmup else ("yes" if not summary.problems() else "NO (below)")


def markdown_table(summaries: list[RunSummary], brief: bool = False,
                   usable: Callable[[RunSummary], str] | None = None) -> str:
    """Every column, or with `brief` the BRIEF ones. `usable`: the usable cell, where the caller
    knows more than the run itself (a run the default series skips)."""
    columns = [(name, get) for name, get in COLUMNS if not brief or name in BRIEF]
    names = [name for name, _ in columns]
    cells_of = {id(s): dict(zip([n for n, _ in COLUMNS], _cells(s), strict=True)) for s in summaries}
    if usable is not None or brief:
        for s in summaries:
            cells_of[id(s)]["usable"] = (usable or brief_usable)(s)
    rows = [[cells_of[id(s)][name] for name in names] for s in summaries]
    lines = ["| " + " | ".join(names) + " |", "|" + "|".join(" --- " for _ in names) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    if any(cell.endswith(UNBOUND_MARK) for cells in rows for cell in cells):
        lines.append(f"\n{UNBOUND_LEGEND} (the client timing note says by how much)")
    return "\n".join(lines)


def brief_notes(summary: RunSummary) -> list[str]:
    """Only why a measured run may not be used: the notes the brief table's 'NO (below)' points to."""
    if summary.warmup:
        return []
    return [f"{summary.name}: not usable: {problem}" for problem in summary.problems()]


def notes(summary: RunSummary) -> list[str]:
    out = []
    name = f"{summary.name} (warmup, discarded)" if summary.warmup else summary.name  # each note says which run it is of
    metrics = summary.metrics
    tokens = metrics.tokens
    window = metrics.window
    out.append(f"{name}: window {window.seconds:.1f} s of {window.run_end - window.run_start:.1f} s "
               f"({'steady state: ' if window.steady else 'NOT at steady state: '}{window.opened_by})")
    requests = metrics.requests
    outside = requests.total - requests.completed - requests.cut_by_window - sum(
        n for kind, n in requests.errors.items() if kind != "cut_by_window")
    if requests.cut_by_window or outside > 0:
        out.append(f"{name}: of {requests.total} request(s), {requests.completed} completed inside the window (the per-request "
                   f"figures), {requests.cut_by_window} cut by its end (their tokens inside it count in output tok/s)"
                   + (f", {outside} sent outside it (the ramp before, the drain after)" if outside > 0 else ""))
    if tokens.usage_vs_chunks_mismatched_requests:
        out.append(f"{name}: usage and chunk counts differ by more than {tokens.tolerance:.0%} in "
                   f"{tokens.usage_vs_chunks_mismatched_requests} request(s) (mean {tokens.usage_vs_chunks_mean_difference:+.1f} "
                   f"tokens): the server puts several tokens in some chunks; ITL is per chunk, token rates count tokens "
                   f"({tokens.per_chunk}, {tokens.run_tokens_per_chunk:.2f} tokens per chunk)")
    if tokens.usage_vs_tokenizer_mismatched_requests:
        out.append(f"{name}: usage and a re-tokenisation of the streamed text differ beyond "
                   f"{tokens.tolerance:.0%} in {tokens.usage_vs_tokenizer_mismatched_requests} request(s) (mean "
                   f"{tokens.usage_vs_tokenizer_mean_difference:+.1f} tokens; decoded text does not always re-encode to the same tokens)")
    if metrics.requests.burst_requests:
        out.append(f"{name}: {metrics.requests.burst_requests} request(s) received chunks in a burst no server makes "
                   "(gaps under a tenth of the run's median ITL): the client read a backlog; per-request rates of those are "
                   "client artefacts, the token-weighted figures are not moved by them")
    if not summary.scenario.unique_prompts and not summary.imported:
        out.append(f"{name}: prompts are not unique per request: a prefix cache may answer repeated prompts")
    if tokens.cached_share:
        out.append(f"{name}: the server answered {100 * tokens.cached_share:.1f}% of prompt tokens from its prefix cache")
    arrivals = metrics.arrivals
    if arrivals and arrivals.scheduled:
        target = f" of {arrivals.target_rate:g} targeted" if arrivals.target_rate else ""
        delay = arrivals.queue_delay_s
        line = (f"{name}: arrivals: sent {arrivals.achieved_rate or 0:.2f} req/s{target} ({arrivals.sent} sent, "
                f"{arrivals.scheduled} scheduled in the window, {arrivals.unsent} never sent); client-side queueing delay "
                f"p50 {1000 * ((delay.p50 if delay else None) or 0):.1f} ms p99 {1000 * ((delay.p99 if delay else None) or 0):.1f} ms, "
                f"{arrivals.queued} arrival(s) "
                f"waited for a free user ({'the scenario caps concurrency at' if arrivals.capped else 'pool of'} {arrivals.pool})")
        gaps = arrivals.gaps
        if gaps:
            line += (f"; gaps vs {gaps.distribution}: KS p={gaps.ks_p:.3f} over {gaps.n} (CV {gaps.cv:.2f}; the schedule is "
                     "drawn once from the scenario's seed, so this p describes that one draw, the same every run)")
        out.append(line)
    conversation = metrics.conversation
    if conversation and conversation.turns:
        turns = ", ".join(f"turn {k}: {t.prompt_tokens_mean:.0f} prompt tokens, "
                          f"{'-' if t.cached_share is None else format(t.cached_share, '.0%')} cached"
                          for k, t in conversation.turns.items() if t.prompt_tokens_mean is not None)
        out.append(f"{name}: {conversation.conversations} conversation(s) ({conversation.conversations_ended_by_error} ended by "
                   f"an error); {turns}")
    lengths = metrics.output_lengths
    if lengths and lengths.exact_share is not None and lengths.exact_share < 1.0:
        out.append(f"{name}: only {100 * lengths.exact_share:.0f}% of requests produced the output length they asked for "
                   f"(asked mean {lengths.requested.mean or 0:.1f}, got {lengths.delivered.mean or 0:.1f}): the engine stops "
                   "at EOS (it has no ignore_eos), so lengths are the model's")
    if summary.imported:
        out.append(f"{name}: imported from {summary.imported.tool} ({summary.imported.file}); rig did not check that client")
    if summary.interrupted:
        out.append(f"{name}: interrupted; the summary covers what was measured")
    if summary.client.figures:
        out.append(client_note(summary, name))
    out += observation_notes(summary, name)
    for problem in summary.problems():
        if problem != "warmup run":
            out.append(f"{name}: not usable: {problem}")
    return out


def observation_notes(summary: RunSummary, name: str) -> list[str]:
    """What the server's /metrics and the GPUs said over the window: its queue, the output tokens it
    counted beside the client's, and the energy per output token."""
    observations = summary.observations
    if observations is None:
        return []
    out = []
    server = observations.server
    parts = []
    for metric, label, shown in (("running_requests", "running", ",.0f"), ("waiting_requests", "waiting", ",.0f"),
                                 ("kv_cache_usage", "KV cache", ".0%")):
        figure = server.metrics.get(metric)
        if figure is not None and figure.mean is not None and figure.max is not None:
            parts.append(f"{label} {figure.mean:{shown}} mean, {figure.max:{shown}} max")
    preemptions = server.metrics.get("preemptions_per_s")
    if preemptions is not None and preemptions.rate:
        parts.append(f"{preemptions.rate:.2f} preemptions/s")
    if parts:
        out.append(f"{name}: server ({server.engine} /metrics, {server.scrapes} scrapes in the window): " + "; ".join(parts))
    agreement = observations.output_tokens
    if agreement is not None:
        apart = abs(agreement.difference) > TOKEN_AGREEMENT_LIMIT
        out.append(f"{name}: output tokens over the {agreement.seconds:.1f} s between the server's first and last scrape in "
                   f"the window: client {agreement.client_tokens:,.0f}, server {agreement.server_tokens:,.0f} "
                   f"({agreement.difference:+.2%}{f', more than {TOKEN_AGREEMENT_LIMIT:.0%} apart' if apart else ''})")
    gpu = observations.gpu
    if gpu is not None and gpu.power_w_mean_total is not None:
        serving = ", ".join(str(index) for index in gpu.serving_gpus) or "all"
        energy = f", {gpu.j_per_output_token:.3g} J per output token" if gpu.j_per_output_token is not None else ""
        events = f"; clock events: {', '.join(gpu.clock_events)}" if gpu.clock_events else ""
        out.append(f"{name}: GPU {serving}: {gpu.power_w_mean_total:.0f} W mean{energy}{events}")
    return out


def client_note(summary: RunSummary, name: str | None = None) -> str:
    """Each figure with the most the client's timing could have moved it: 'itl_p50_ms +/- 0.3% (client)'.
    `name`: how the run is named in its notes (a warmup's says so)."""
    parts = []
    for figure, bound in summary.client.figures.items():
        amount = "unbounded" if bound.bound is None else f"+/- {share_text(bound.bound, bound.limit)}"
        parts.append(f"{figure} {amount}" + ("" if bound.holds else " NOT USABLE"))
    limit = next(iter(summary.client.figures.values())).limit
    text = f"{name or summary.name}: client timing (limit {share_text(limit)}): " + ", ".join(parts)
    # a gevent sleep: no kernel timer where the client ran (not Linux), or a run recorded before there was one
    if summary.client.processes and (not summary.client.lag_probes or LAG_PROBE_SLEEP in summary.client.lag_probes):
        text += (f" (lag timed on a {LAG_PROBE_SLEEP}, up to 1 ms later than a socket event: these bounds are wider than the "
                 "client's own delays at low event rates)")
    return text


def write_run(out_dir: Path, summary: RunSummary) -> None:
    summary.write(out_dir)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    # a figure the client's timing could move beyond its limit is named, as the table marks it
    writer.writerow([name for name, _ in COLUMNS] + ["not usable (client)"])
    figures = summary.client.figures
    writer.writerow(row(summary) + [" ".join(name for column, name in COLUMN_FIGURES.items()
                                             if (bound := figures.get(name)) is not None and not bound.holds)])
    write_text_atomic(out_dir / "summary.csv", buffer.getvalue())
    provenance = summary.provenance
    host = provenance.host
    text = [markdown_table([summary]), "",
            f"recipe {provenance.recipe}{':' + provenance.variant if provenance.variant else ''}, boot {provenance.boot_id}, "
            f"engine {provenance.engine}, host {host.cpu if host else None} x{host.cpu_count if host else None}, "
            f"GPUs {', '.join(host.gpus if host else []) or 'none'}"]
    text += notes(summary)
    write_text_atomic(out_dir / "summary.md", "\n".join(text) + "\n")
