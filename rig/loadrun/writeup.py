"""What a run's files yield once its Locust processes are gone: the window events and each process's
raw samples they wrote, and the observations beside the load (the server's metrics, the GPUs'
telemetry, the run's timeline picture), each read inside the run's window."""

from __future__ import annotations

from pathlib import Path

from rig.load.records import RequestRecord
from rig.load.request_metrics import chunk_token_counts, run_tokens_per_chunk, tokens_read_between
from rig.load.summary import Metrics, Observations, TokenAgreement, Window
from rig.load.wire import WINDOW_FILE, ClientStats, WindowEvent, client_file, dispatcher_file, read_lines
from rig.observe.gpu import summarize_gpu_samples
from rig.observe.server_metrics import ServerMetrics, summarize_server_metrics
from rig.observe.timeline import write_timeline

SERVER_METRICS = "server-metrics.jsonl"  # raw Prometheus samples, one line per scrape
GPU_SAMPLES = "gpu-samples.jsonl"  # NVML samples of the local GPUs
TIMELINE = "timeline.png"


def read_window_events(directory: Path) -> dict[str, float]:
    """Locust's own moments (spawning_complete, stopping), as the locustfile wrote them: the first
    of each."""
    events: dict[str, float] = {}
    for event in read_lines(directory / WINDOW_FILE, WindowEvent):
        events.setdefault(event.event, event.time)
    return events


def read_clients(directory: Path) -> list[ClientStats]:
    """Each Locust process's raw samples; a file cut by a kill mid-write counts one process fewer."""
    clients = []
    for path in sorted(directory.glob(client_file("*"))):
        client = ClientStats.parse_line(path.read_bytes(), str(path))
        if client is not None:
            clients.append(client)
    return clients


def read_dispatcher(directory: Path) -> ClientStats | None:
    """The Locust master's samples, in a distributed run (None: one process, or a run before they were written)."""
    path = next(iter(sorted(directory.glob(dispatcher_file("*")))), None)
    return None if path is None else ClientStats.parse_line(path.read_bytes(), str(path))


def observe(out_dir: Path, records: list[RequestRecord], window: Window, metrics: Metrics, title: str,
            serving_gpus: list[int] | None = None) -> Observations:
    """What the server and the GPUs did inside the window, and the run's timeline picture."""
    server = summarize_server_metrics(out_dir / SERVER_METRICS, (window.start, window.end))
    observations = Observations(server=server, output_tokens=token_agreement(server, records))
    if (out_dir / GPU_SAMPLES).exists():
        tokens = metrics.output_tok_s * window.seconds
        observations.gpu = summarize_gpu_samples(out_dir / GPU_SAMPLES, (window.start, window.end), tokens, serving_gpus)
    picture = draw_timeline(out_dir, records, window, title)
    observations.timeline = picture.name if picture else None
    return observations


def token_agreement(server: ServerMetrics, records: list[RequestRecord]) -> TokenAgreement | None:
    """The client's output tokens read between the server's first and last scrape inside the window,
    beside the increase of the server's generation-token counter over the same scrapes."""
    generated = server.metrics.get("generation_tokens_per_s")
    if server.span is None or generated is None or generated.increase is None or generated.increase <= 0:
        return None
    first, last = server.span
    client = tokens_read_between(records, first, last, run_tokens_per_chunk(records))
    return TokenAgreement(seconds=last - first, client_tokens=client, server_tokens=generated.increase,
                          difference=client / generated.increase - 1)


def timeline_title(scenario: str, ref: str, boot_id: str | None) -> str:
    return f"{scenario} on {ref} (boot {boot_id})"


def draw_timeline(out_dir: Path, records: list[RequestRecord], window: Window, title: str) -> Path | None:
    """The run's timeline picture (client tokens, the server's queues and KV use, the GPUs' clocks
    and power over the run, the window marked), from what the run wrote: redrawn from the same
    files by benchmarks/redraw_timelines.py, so archives of raw results need not keep the PNGs."""
    ratio = run_tokens_per_chunk(records)
    events = [(t, n) for r in records for t, n in zip(r.chunks, chunk_token_counts(r, ratio))]
    return write_timeline(out_dir / TIMELINE, events, out_dir / SERVER_METRICS,
                          out_dir / GPU_SAMPLES if (out_dir / GPU_SAMPLES).exists() else None, (window.start, window.end), title)
