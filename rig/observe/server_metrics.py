"""The engine's own view of a run, from its Prometheus page.

Client-side tok/s says that a change moved throughput; the server's running and waiting
requests, KV-cache usage, prefix-cache hits and speculative acceptance say why. A background
thread scrapes `GET {base_url}/metrics` at a fixed interval and appends one JSON line per
scrape (time + samples) as it is taken, so an interrupted run keeps what was scraped.
`summarize_server_metrics` reduces a window of those lines with the name table in
server_metrics.yaml (one source of truth for which series mean what, per engine).
"""

from __future__ import annotations

import math
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SerializerFunctionWrapHandler, model_serializer

from rig.observe import jsonl
from rig.typed import Typed

NAME_TABLE = Path(__file__).with_name("server_metrics.yaml")
# Histogram buckets and creation stamps are most of a page and explain nothing here.
DROPPED_SUFFIXES = ("_bucket", "_created")

Sample = tuple[str, dict[str, str], float]


@cache
def name_table() -> dict[str, Any]:
    return yaml.safe_load(NAME_TABLE.read_text())["engines"]


def parse_exposition(text: str, keep_buckets: bool = False) -> list[Sample]:
    """Prometheus text exposition -> (sample name, labels, value), via prometheus_client's parser.
    A NaN or infinite value (the format allows them: a gauge the server cannot tell) says nothing
    of the quantity: that series is left out of this scrape, as if the server had not sent it."""
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not keep_buckets and sample.name.endswith(DROPPED_SUFFIXES):
                continue
            if math.isfinite(value := float(sample.value)):
                samples.append((sample.name, dict(sample.labels), value))
    return samples


class MetricsScraper:
    """Scrapes `{base_url}/metrics` every `interval_s` in a daemon thread, appending to `out_path`.

    A missing endpoint (404) or an unreachable server is written once as a `note` line and
    kept in `self.note`; it is never an error, because not every server exposes metrics.
    """

    def __init__(self, base_url: str, out_path: Path | str, interval_s: float = 1.0, api_key: str | None = None,
                 keep_buckets: bool = False) -> None:
        self.url = base_url.rstrip("/") + "/metrics"
        self.out_path = Path(out_path)
        self.interval_s = interval_s
        self.keep_buckets = keep_buckets
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.note: str | None = None
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> MetricsScraper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Takes one last scrape so the window's end is covered, then joins the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 10)
            self._thread = None

    def _loop(self) -> None:
        session = requests.Session()
        with open(self.out_path, "a") as out:
            next_at = time.monotonic()
            while True:
                stopping = self._stop.is_set()
                if not self._scrape_once(session, out) or stopping:
                    return
                next_at += self.interval_s
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _scrape_once(self, session: requests.Session, out: Any) -> bool:
        """One scrape; False when the endpoint does not exist and scraping should end."""
        sent = time.time()
        try:
            response = session.get(self.url, headers=self.headers, timeout=max(2.0, 2 * self.interval_s))
        except requests.RequestException as error:
            self._write_note(out, f"{self.url} unreachable: {type(error).__name__}")
            return True
        if response.status_code != 200:
            self._write_note(out, f"{self.url} answered HTTP {response.status_code}: no server metrics")
            return response.status_code not in (404, 405)
        samples = parse_exposition(response.text, self.keep_buckets)
        # The midpoint of the request is the best estimate of when the page was rendered.
        jsonl.append(out, {"time": (sent + time.time()) / 2, "samples": samples})
        self.scrapes += 1
        return True

    def _write_note(self, out: Any, note: str) -> None:
        if self.note is None:
            self.note = note
            jsonl.append(out, {"time": time.time(), "note": note})


def read_scrapes(path: Path | str) -> tuple[list[dict[str, Any]], list[str]]:
    """(scrapes in time order, notes)."""
    scrapes, notes = [], []
    path = Path(path)
    if not path.exists():
        return [], [f"{path.name} missing: no server metrics were scraped"]
    for entry in jsonl.read(path, _scrape_or_note):
        if "note" in entry:
            notes.append(entry["note"])
        elif "samples" in entry:
            scrapes.append(entry)
    scrapes.sort(key=lambda entry: entry["time"])
    return scrapes, notes


def _scrape_or_note(entry: dict[str, Any]) -> bool:
    """A note, or a scrape: its time and samples as parse_exposition gives them."""
    if "note" in entry:
        return isinstance(entry["note"], str)
    samples = entry.get("samples")
    return "time" in entry and isinstance(samples, list) and all(
        isinstance(sample, list) and len(sample) == 3 and isinstance(sample[0], str) and isinstance(sample[1], dict)
        and all(isinstance(v, str) for v in sample[1].values()) and jsonl.finite(sample[2]) for sample in samples)


def _matches(series: str | dict[str, Any], name: str, labels: dict[str, str]) -> bool:
    if isinstance(series, str):
        return name == series
    if name != series["name"]:
        return False
    for key, wanted in (series.get("labels") or {}).items():
        allowed = wanted if isinstance(wanted, list) else [wanted]
        if labels.get(key) not in [str(value) for value in allowed]:
            return False
    return True


def _values(scrape: dict[str, Any], series: str | dict[str, Any]) -> list[float]:
    return [value for name, labels, value in scrape["samples"] if _matches(series, name, labels)]


def _with_suffix(series: str | dict[str, Any], suffix: str) -> str | dict[str, Any]:
    return series + suffix if isinstance(series, str) else {**series, "name": series["name"] + suffix}


def _increase(scrapes: list[dict[str, Any]], series: str | dict[str, Any]) -> float | None:
    """Counter increase across scrapes, summed over label sets; a drop is a restart from zero."""
    totals = [sum(values) for scrape in scrapes if (values := _values(scrape, series))]
    if len(totals) < 2:
        return None
    increase = 0.0
    for before, after in zip(totals, totals[1:]):
        increase += after - before if after >= before else after
    return increase


def _combine(values: list[float], across: str) -> float:
    if across == "sum":
        return sum(values)
    if across == "max":
        return max(values)
    return sum(values) / len(values)



class ServerFigure(Typed):
    """One metric of the name table over the window, by its kind: a gauge's mean, max and scrapes
    (n); a counter's rate and increase; a histogram's mean and count; a ratio's value, numerator and
    denominator. Fields another kind has are left out of the JSON."""

    unit: str | None = None
    mean: float | None = None
    max: float | None = None
    n: int | None = None
    rate: float | None = None
    increase: float | None = None
    count: float | None = None
    value: float | None = None
    numerator: float | None = None
    denominator: float | None = None

    @model_serializer(mode="wrap")
    def _kind_fields_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class ServerMetrics(Typed):
    """Per-run figures over the window from a scrape file (summarize_server_metrics)."""

    engine: str | None
    scrapes: int
    window: tuple[float, float] | None
    notes: list[str]
    span: tuple[float, float] | None = None  # the first and the last scrape inside the window: what counters' increases cover
    metrics: dict[str, ServerFigure | None]  # None where the engine did not expose the metric


def _reduce(spec: dict[str, Any], scrapes: list[dict[str, Any]]) -> ServerFigure | None:
    kind = spec["kind"]
    if kind == "gauge":
        per_scrape = [_combine(values, spec.get("across", "mean")) for scrape in scrapes if (values := _values(scrape, spec["series"]))]
        if not per_scrape:
            return None
        return ServerFigure(mean=sum(per_scrape) / len(per_scrape), max=max(per_scrape), n=len(per_scrape))
    if len(scrapes) < 2:
        return None
    if kind == "counter":
        increase = _increase(scrapes, spec["series"])
        seconds = scrapes[-1]["time"] - scrapes[0]["time"]
        return None if increase is None or seconds <= 0 else ServerFigure(rate=increase / seconds, increase=increase)
    if kind == "histogram":
        total = _increase(scrapes, _with_suffix(spec["series"], "_sum"))
        count = _increase(scrapes, _with_suffix(spec["series"], "_count"))
        return None if total is None or not count else ServerFigure(mean=total / count, count=count)
    if kind == "ratio":
        numerator, denominator = _increase(scrapes, spec["numerator"]), _increase(scrapes, spec["denominator"])
        if numerator is None or not denominator:
            return None
        return ServerFigure(value=numerator / denominator + spec.get("offset", 0), numerator=numerator, denominator=denominator)
    raise ValueError(f"server_metrics.yaml: unknown kind {kind!r}; use gauge, counter, histogram or ratio")


def detect_engine(scrapes: list[dict[str, Any]]) -> str | None:
    """The engine whose prefix names the most samples (a proxy may add its own series)."""
    counts = {engine: sum(1 for scrape in scrapes for name, _, _ in scrape["samples"] if name.startswith(table["prefix"]))
              for engine, table in name_table().items()}
    best = max(counts, key=lambda engine: counts[engine], default=None)
    return best if best is not None and counts[best] else None


def gauge_series(path: Path | str, metric: str) -> list[tuple[float, float]]:
    """(time, value) per scrape of one gauge of the name table (running_requests, kv_cache_usage, ...), for plots."""
    scrapes, _ = read_scrapes(path)
    engine = detect_engine(scrapes)
    spec = name_table()[engine]["metrics"].get(metric) if engine else None
    if spec is None or spec["kind"] != "gauge":
        return []
    return [(scrape["time"], _combine(values, spec.get("across", "mean"))) for scrape in scrapes
            if (values := _values(scrape, spec["series"]))]


def summarize_server_metrics(path: Path | str, window: tuple[float, float] | None = None) -> ServerMetrics:
    """Per-run figures over the window (epoch seconds, as the records use) from a scrape file; a
    metric is None where the engine did not expose it (speculative decoding off, say)."""
    scrapes, notes = read_scrapes(path)
    if window is not None:
        start, end = window
        scrapes = [scrape for scrape in scrapes if start <= scrape["time"] <= end]
    engine = detect_engine(scrapes)
    summary = ServerMetrics(engine=engine, scrapes=len(scrapes), window=window, notes=notes, metrics={},
                            span=(scrapes[0]["time"], scrapes[-1]["time"]) if scrapes else None)
    if engine is None:
        if scrapes:
            summary.notes = [*notes, "no sglang: or vllm: series on the page"]
        return summary
    for metric, spec in name_table()[engine]["metrics"].items():
        figures = _reduce(spec, scrapes)
        if figures is not None and spec.get("unit"):
            figures.unit = spec["unit"]
        summary.metrics[metric] = figures
    return summary
