"""The server's and the GPUs' figures in summary.md: the queue, the client's output tokens beside the
server's own counter over the same span, and the energy per output token (a c=3000 run's queue
depth and running requests, its tokens against vllm:generation_tokens_total, J per token)."""

from __future__ import annotations

import numpy as np
import pytest
from simulated_runs import round_result, simulate_round

from rig.load.records import RequestRecord
from rig.load.report import notes
from rig.load.summary import Observations, TokenAgreement
from rig.loadrun.writeup import token_agreement
from rig.observe.gpu import GpuSummary
from rig.observe.server_metrics import ServerFigure, ServerMetrics


def _server(span: tuple[float, float] | None, generated: float | None) -> ServerMetrics:
    metrics = {"running_requests": ServerFigure(mean=1009.47, max=1024.0, n=89),
               "waiting_requests": ServerFigure(mean=1954.2, max=1976.0, n=89),
               "kv_cache_usage": ServerFigure(unit="fraction", mean=0.4367, max=0.7005, n=89),
               "preemptions_per_s": ServerFigure(rate=0.0, increase=0.0),
               "generation_tokens_per_s": None if generated is None else ServerFigure(rate=generated / 88.0, increase=generated)}
    return ServerMetrics(engine="vllm", scrapes=89, window=(0.0, 90.0), notes=[], metrics=metrics, span=span)


def _stream(user: str, chunks: list[float], tokens: list[int]) -> RequestRecord:
    return RequestRecord(id=f"p-{user}", process="p", user=user, prompt="x", t_send=chunks[0] - 0.5, t_first=chunks[0],
                         t_last=chunks[-1], t_end=chunks[-1], chunks=chunks, chunk_tokens=tokens, status=200,
                         usage={"completion_tokens": sum(tokens)}, finish_reason="length")


def test_the_clients_tokens_are_counted_over_the_scrapes_span_only():
    """A counter's increase covers its first and last scrape inside the window, not the window: the
    client's tokens are counted over that same span (each chunk's tokens, from continuous usage)."""
    records = [_stream("a", [9.0, 10.0, 11.0, 20.0, 21.0], [2, 2, 2, 2, 2]), _stream("b", [10.5, 19.9, 20.1], [1, 1, 1])]
    agreement = token_agreement(_server((10.0, 20.0), 5.0), records)
    # inside [10, 20]: a's chunks at 10, 11 and 20 (2 tokens each) and b's at 10.5 and 19.9 (1 each)
    assert agreement == TokenAgreement(seconds=10.0, client_tokens=8.0, server_tokens=5.0, difference=8.0 / 5.0 - 1)
    assert token_agreement(_server(None, 5.0), records) is None  # no scrape inside the window
    assert token_agreement(_server((10.0, 20.0), None), records) is None  # an engine with no generation counter
    assert token_agreement(_server((10.0, 10.0), 0.0), records) is None  # one scrape: no increase


@pytest.mark.parametrize("difference, named", [(-0.0001, False), (0.035, True)])
def test_summary_md_names_the_queue_the_servers_count_and_the_energy_per_token(difference, named):
    _, measured = round_result(simulate_round(np.random.default_rng(1), 0.02, 0.1, 4.0), 4.0, None)
    gpu = GpuSummary(samples=358, window=(0.0, 90.0), notes=[], gpus={}, serving_gpus=[0], power_w_mean_total=676.36,
                     energy_j=60275.7, output_tokens=2439657.0, j_per_output_token=0.0247066, clock_events=["sw_power_cap"])
    server_tokens = 2414386.0
    observed = measured.model_copy(update={"observations": Observations(
        server=_server((1.0, 89.0), server_tokens), gpu=gpu,
        output_tokens=TokenAgreement(seconds=88.0, client_tokens=server_tokens * (1 + difference), server_tokens=server_tokens,
                                     difference=difference))})
    lines = notes(observed)
    name = measured.name
    assert (f"{name}: server (vllm /metrics, 89 scrapes in the window): running 1,009 mean, 1,024 max; "
            "waiting 1,954 mean, 1,976 max; KV cache 44% mean, 70% max") in lines, lines
    agreement = next(line for line in lines if "between the server's first and last scrape" in line)
    assert f"server 2,414,386 ({difference:+.2%}" in agreement and ("more than 2% apart" in agreement) == named, agreement
    assert f"{name}: GPU 0: 676 W mean, 0.0247 J per output token; clock events: sw_power_cap" in lines, lines
    assert not any("server (" in line or "GPU" in line for line in notes(measured.model_copy(update={"observations": None})))
