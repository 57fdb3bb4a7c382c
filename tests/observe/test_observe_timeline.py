"""Timelines: a PNG with one panel per kind of data present, none for data that is absent."""

from __future__ import annotations

import json

import matplotlib.image
import pytest

from rig.observe.timeline import tokens_per_second, write_timeline

DPI, PANEL_IN, MARGIN_IN = 110, 1.9, 0.8


def panels_drawn(png) -> int:
    height = matplotlib.image.imread(png).shape[0]
    return round((height / DPI - MARGIN_IN) / PANEL_IN)


def synthetic_inputs(tmp_path):
    events = [(100.0 + i * 0.01, 1) for i in range(1000)]  # 100 tok/s for 10 s
    metrics = tmp_path / "server-metrics.jsonl"
    metrics.write_text("".join(json.dumps({"time": 100.0 + s, "samples": [["vllm:num_requests_running", {}, 4],
                                                                        ["vllm:num_requests_waiting", {}, s % 3],
                                                                        ["vllm:kv_cache_usage_perc", {}, s / 20]]}) + "\n"
                               for s in range(11)))
    gpus = tmp_path / "gpu.jsonl"
    gpus.write_text("".join(json.dumps({"time": 100.0 + s / 2, "gpus": [{"index": i, "sm_mhz": 1980 - 10 * i, "mem_mhz": 3201,
                                                                          "power_w": 600 + s, "power_limit_w": 700}
                                                                         for i in range(2)]}) + "\n" for s in range(21)))
    return events, metrics, gpus


def test_tokens_per_second_bins_the_events():
    rate, bin_s = tokens_per_second([(10.0 + i * 0.01, 2) for i in range(500)], bin_s=0.5)
    assert bin_s == 0.5 and len(rate) == 11  # ten bins and a closing point
    assert all(value == pytest.approx(200) for _, value in rate)  # 100 events/s x 2 tokens


def test_a_timeline_has_a_panel_per_kind_of_data(tmp_path):
    events, metrics, gpus = synthetic_inputs(tmp_path)
    full = write_timeline(tmp_path / "full.png", events, metrics, gpus, window=(101.0, 109.0), title="synthetic")
    assert full.exists() and panels_drawn(full) == 5  # tok/s, requests, KV usage, clocks, power
    assert b"tEXtSoftware" not in full.read_bytes()  # matplotlib's default chunk names its home page


def test_panels_without_data_are_left_out(tmp_path):
    events, _, _ = synthetic_inputs(tmp_path)
    client_only = write_timeline(tmp_path / "client.png", events, tmp_path / "absent.jsonl", tmp_path / "absent-gpu.jsonl")
    assert panels_drawn(client_only) == 1
    assert write_timeline(tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()
