"""One picture per run: what the client received, what the server held, what the GPUs did.

Tokens per second, running/waiting requests, KV-cache usage, GPU clocks and power on one
shared time axis, with the measurement window shaded, so a dip in tok/s can be read against
a queue that filled, a cache that ran full or a clock that dropped. Panels without data are
left out, so the same call serves a CPU box with no metrics endpoint and an 8-GPU boot.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend is chosen first: no display on servers
import numpy as np  # noqa: E402

from rig.observe import jsonl  # noqa: E402
from rig.observe.gpu import gpu_sample_or_note  # noqa: E402
from rig.observe.server_metrics import gauge_series  # noqa: E402
from rig.png import save_png  # noqa: E402

Series = list[tuple[float, float]]


def tokens_per_second(events: Iterable[tuple[float, float]], bin_s: float | None = None) -> tuple[Series, float]:
    """(bin start, tok/s) from (arrival time, tokens) events; the bin widens with the run so a
    long run is not drawn as noise (about 200 bins, never under 0.25 s)."""
    events = sorted(events)
    if not events:
        return [], 0.0
    start, end = events[0][0], events[-1][0]
    bin_s = bin_s or max(0.25, (end - start) / 200)
    edges = np.arange(start, end + bin_s, bin_s)
    sums, _ = np.histogram([t for t, _ in events], bins=edges, weights=[n for _, n in events])
    rate = [(float(edge), float(total) / bin_s) for edge, total in zip(edges[:-1], sums)]
    if len(rate) > 1 and end - edges[-2] < bin_s / 2:
        rate.pop()  # a last bin that the run covered only in part would read as a collapse
    # A closing point, so a step drawing shows the last bin over its whole width.
    return [*rate, (rate[-1][0] + bin_s, rate[-1][1])], bin_s


def gpu_series(path: Path | str, field: str) -> dict[int, Series]:
    series: dict[int, Series] = {}
    if not Path(path).exists():
        return series
    for entry in jsonl.read(path, gpu_sample_or_note):
        for gpu in entry.get("gpus", []):
            if gpu.get(field) is not None:
                series.setdefault(gpu["index"], []).append((entry["time"], gpu[field]))
    return series


def write_timeline(out_path: Path | str, token_events: Iterable[tuple[float, float]] = (),
                   server_metrics_path: Path | str | None = None, gpu_samples_path: Path | str | None = None,
                   window: tuple[float, float] | None = None, title: str = "") -> Path | None:
    """Writes the PNG and returns its path; None when there is nothing to draw."""
    panels: list[tuple[str, dict[str, Series], dict[str, str]]] = []  # (y label, label -> series, label -> style)
    rate, bin_s = tokens_per_second(token_events)
    if rate:
        panels.append((f"output tok/s\n({bin_s:g} s bins)", {"client-received": rate}, {"client-received": "steps-post"}))
    if server_metrics_path is not None:
        requests = {label: gauge_series(server_metrics_path, metric)
                    for label, metric in (("running", "running_requests"), ("waiting", "waiting_requests"))}
        requests = {label: points for label, points in requests.items() if points}
        if requests:
            panels.append(("requests\n(server)", requests, {}))
        usage = gauge_series(server_metrics_path, "kv_cache_usage")
        if usage:
            panels.append(("KV cache\nusage (%)", {"KV usage": [(t, 100 * v) for t, v in usage]}, {}))
    if gpu_samples_path is not None:
        clocks = {f"GPU{index} SM": points for index, points in gpu_series(gpu_samples_path, "sm_mhz").items()}
        clocks.update({f"GPU{index} mem": points for index, points in gpu_series(gpu_samples_path, "mem_mhz").items()})
        if clocks:
            panels.append(("GPU clock\n(MHz)", clocks, {label: "dashed" for label in clocks if label.endswith("mem")}))
        power = {f"GPU{index}": points for index, points in gpu_series(gpu_samples_path, "power_w").items()}
        limits = gpu_series(gpu_samples_path, "power_limit_w")
        if power:
            power.update({f"GPU{index} limit": points for index, points in limits.items()})
            panels.append(("GPU power\n(W)", power, {label: "dotted" for label in power if label.endswith("limit")}))
    if not panels:
        return None
    origin = window[0] if window else min(t for _, lines, _ in panels for points in lines.values() for t, _ in points)
    figure, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(11, 1.9 * len(panels) + 0.8), squeeze=False)
    for axis, (ylabel, lines, styles) in zip(axes[:, 0], panels):
        for label, points in lines.items():
            times = [t - origin for t, _ in points]
            values = [v for _, v in points]
            style = styles.get(label, "solid")
            if style == "steps-post":
                axis.step(times, values, where="post", label=label, linewidth=1)
            else:
                axis.plot(times, values, linestyle=style, label=label, linewidth=1.2)
        if window:
            axis.axvspan(0, window[1] - window[0], color="tab:green", alpha=0.12, linewidth=0)
        axis.set_ylabel(ylabel, fontsize=9)
        axis.set_ylim(0, axis.get_ylim()[1] * 1.08)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)  # outside: never over a line
    axes[-1, 0].set_xlabel("seconds from the start of the measured window (shaded)" if window else "seconds")
    figure.suptitle(title or "run timeline", fontsize=11)
    figure.tight_layout()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    save_png(figure, out_path)
    plt.close(figure)
    return out_path
