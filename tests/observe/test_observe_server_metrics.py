"""Server metrics: the timed server's /metrics page scraped during real streams summarises to
its known token rate and concurrency; SGLang- and vLLM-shaped pages (rendered by
prometheus_client itself) reduce to rates, gauges, histogram means and ratios; a server
without the endpoint is noted once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import requests
from conftest import REPO, free_port
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rig.observe.server_metrics import MetricsScraper, name_table, parse_exposition, summarize_server_metrics
from rig.observe.timeline import write_timeline

TTFT, ITL, USERS, TOKENS = 0.3, 0.02, 4, 400


def start_timed_server(port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "rig.testing.timed_server", "--port", str(port), "--ttft", str(TTFT),
                                "--itl", str(ITL)], cwd=REPO)
    for _ in range(100):
        try:
            requests.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return process
        except requests.ConnectionError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("timed server did not start")


@pytest.fixture
def timed_server():
    port = free_port()
    process = start_timed_server(port)
    yield f"http://127.0.0.1:{port}"
    process.kill()
    process.wait()


def stream_one(base_url: str, arrivals: list[float]) -> None:
    body = {"model": "timed", "messages": [{"role": "user", "content": "hi"}], "max_tokens": TOKENS, "stream": True}
    with requests.post(f"{base_url}/v1/chat/completions", json=body, stream=True, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith(b"data: {"):
                arrivals.append(time.time())


@pytest.mark.timed
def test_scraping_the_timed_server_recovers_its_token_rate_and_concurrency(timed_server, tmp_path):
    out = tmp_path / "server-metrics.jsonl"
    arrivals: list[list[float]] = [[] for _ in range(USERS)]
    with MetricsScraper(timed_server, out, interval_s=0.25) as scraper:
        time.sleep(0.5)
        started = time.time()
        streams = [threading.Thread(target=stream_one, args=(timed_server, arrivals[i])) for i in range(USERS)]
        for thread in streams:
            thread.start()
        for thread in streams:
            thread.join()
    assert scraper.note is None
    assert all(len(a) == TOKENS for a in arrivals)
    # Every stream decodes from started + TTFT to started + TTFT + (TOKENS - 1) * ITL: clip a margin off both ends.
    window = (started + TTFT + 0.5, started + TTFT + (TOKENS - 1) * ITL - 0.5)
    summary = summarize_server_metrics(out, window)
    print(summary.model_dump_json(indent=1))
    assert summary.engine == "vllm"
    assert summary.scrapes >= 0.8 * (window[1] - window[0]) / 0.25
    metrics = summary.metrics
    truth = USERS / ITL
    assert abs(metrics["generation_tokens_per_s"].rate - truth) <= 0.03 * truth, metrics["generation_tokens_per_s"]
    assert metrics["running_requests"].mean == pytest.approx(USERS)
    assert metrics["running_requests"].max == USERS
    assert metrics["waiting_requests"].mean == 0
    assert metrics["kv_cache_usage"] is None  # not on the timed server's page
    # One line per scrape, each a complete JSON object with a time and samples.
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == scraper.scrapes and all({"time", "samples"} <= set(line) for line in lines)
    # The run's timeline from the same data: client tokens and server requests on one axis.
    events = [(when, 1) for stream in arrivals for when in stream]
    png = write_timeline(tmp_path / "timeline.png", events, out, window=window, title="timed server, 4 streams")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_server_without_the_endpoint_is_noted_once(tmp_path):
    port = free_port()
    import http.server

    class NoMetrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), NoMetrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with MetricsScraper(f"http://127.0.0.1:{port}", tmp_path / "m.jsonl", interval_s=0.05) as scraper:
            time.sleep(0.3)
    finally:
        server.shutdown()
    assert "HTTP 404" in scraper.note
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 1
    summary = summarize_server_metrics(tmp_path / "m.jsonl")
    assert summary.engine is None and summary.notes == [scraper.note]


def test_connection_refused_is_noted_once_while_scraping_goes_on(tmp_path):
    with MetricsScraper(f"http://127.0.0.1:{free_port()}", tmp_path / "m.jsonl", interval_s=0.05) as scraper:
        time.sleep(0.3)
    assert "unreachable" in scraper.note
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 1


def write_scrapes(path, pages: list[tuple[float, bytes]]) -> None:
    with open(path, "w") as out:
        for when, page in pages:
            out.write(json.dumps({"time": when, "samples": parse_exposition(page.decode())}) + "\n")
        out.write('{"time": 9')  # a line cut by a kill mid-write


def test_an_sglang_page_reduces_to_rates_gauges_histograms_and_ratios(tmp_path):
    registry = CollectorRegistry()
    running = Gauge("sglang:num_running_reqs", "", ["tp_rank"], registry=registry)
    usage = Gauge("sglang:token_usage", "", ["tp_rank"], registry=registry)
    generated = Counter("sglang:generation_tokens_total", "", ["is_streaming"], registry=registry)
    effective = Counter("sglang:prefill_effective_tokens_total", "", ["mode"], registry=registry)
    ttft = Histogram("sglang:time_to_first_token_seconds", "", registry=registry)
    pages = []
    for second in range(11):
        running.labels("0").set(10 + second % 2)
        running.labels("1").set(10)
        usage.labels("0").set(0.5)
        usage.labels("1").set(0.25 + second / 100)
        generated.labels("true").inc(300)
        generated.labels("false").inc(100)
        effective.labels("device_hit").inc(30)
        effective.labels("input").inc(70)
        ttft.observe(0.2 if second % 2 else 0.4)
        pages.append((1000.0 + second, generate_latest(registry)))
    write_scrapes(tmp_path / "m.jsonl", pages)
    summary = summarize_server_metrics(tmp_path / "m.jsonl", (1000.0, 1010.0))
    metrics = summary.metrics
    assert summary.engine == "sglang" and summary.scrapes == 11
    assert metrics["generation_tokens_per_s"].rate == pytest.approx(400)
    assert metrics["running_requests"].mean == pytest.approx(20 + 5 / 11)  # ranks add up
    assert metrics["running_requests"].max == 21
    assert metrics["kv_cache_usage"].max == pytest.approx(0.5)  # the fullest rank
    assert metrics["prefix_cache_hit_rate"].value == pytest.approx(0.3)
    assert metrics["ttft_s"].mean == pytest.approx(0.3)  # ten observations after the first scrape: 5 x 0.2 + 5 x 0.4
    assert metrics["spec_accept_length"] is None  # speculative decoding off: not exposed


def test_a_vllm_counter_restart_and_speculative_acceptance(tmp_path):
    pages = []
    for second, (generated, drafts, drafted, accepted) in enumerate([(0, 0, 0, 0), (100, 10, 30, 20), (200, 20, 60, 40),
                                                                      (50, 5, 15, 10)]):  # the engine restarted
        registry = CollectorRegistry()
        Counter("vllm:generation_tokens", "", registry=registry).inc(generated)
        Counter("vllm:spec_decode_num_drafts", "", registry=registry).inc(drafts)
        Counter("vllm:spec_decode_num_draft_tokens", "", registry=registry).inc(drafted)
        Counter("vllm:spec_decode_num_accepted_tokens", "", registry=registry).inc(accepted)
        pages.append((2000.0 + second, generate_latest(registry)))
    write_scrapes(tmp_path / "m.jsonl", pages)
    metrics = summarize_server_metrics(tmp_path / "m.jsonl").metrics
    assert metrics["generation_tokens_per_s"].increase == 250
    assert metrics["spec_accept_rate"].value == pytest.approx(2 / 3)
    assert metrics["spec_accept_length"].value == pytest.approx(3.0)


def test_the_name_table_covers_both_engines_with_the_same_headline_metrics():
    table = name_table()
    headline = {"running_requests", "waiting_requests", "kv_cache_usage", "prefix_cache_hit_rate", "spec_accept_rate",
                "spec_accept_length", "generation_tokens_per_s"}
    for engine in ("sglang", "vllm"):
        assert headline <= set(table[engine]["metrics"]), engine
        for spec in table[engine]["metrics"].values():
            for series in (spec.get("series"), spec.get("numerator"), spec.get("denominator")):
                name = series if isinstance(series, str) or series is None else series["name"]
                # or prometheus_client's own process collector, in the process that serves the page
                assert name is None or name.startswith((table[engine]["prefix"], "process_")), name


def test_the_api_servers_own_cpu_is_read_from_prometheus_clients_process_collector(tmp_path):
    """vLLM at 3000 users on an H200: its API server process at one core, nothing waiting in
    the engine. The page's process collector (prometheus_client's own, as vLLM's API server exposes
    it) gives that process's CPU seconds per second."""
    cpu = {"value": 100.0}

    class Process:  # a collector of the real shape whose clock the test sets
        def collect(self):
            from prometheus_client.core import CounterMetricFamily
            yield CounterMetricFamily("process_cpu_seconds", "Total user and system CPU time spent in seconds.", value=cpu["value"])

    pages = []
    for second in range(6):
        registry = CollectorRegistry()
        registry.register(Process())
        Counter("vllm:generation_tokens", "", registry=registry).inc(100 * second)
        pages.append((3000.0 + second, generate_latest(registry)))
        cpu["value"] += 0.98
    write_scrapes(tmp_path / "m.jsonl", pages)
    figure = summarize_server_metrics(tmp_path / "m.jsonl", (3000.0, 3005.0)).metrics["api_server_cpu"]
    assert figure.unit == "s/s" and figure.rate == pytest.approx(0.98)
