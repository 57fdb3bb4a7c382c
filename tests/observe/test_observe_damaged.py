"""What the server, the GPUs and the engine's processes wrote is input: a NaN gauge (the exposition
format allows it), lines that are not samples, a FIFO or a link to /dev/zero in place of a file.
Each is left out (a sample not taken, a manifest unreadable), or a regular-file refusal in one line
(a RigError kind): never a traceback, a hang, or a figure made of it."""

from __future__ import annotations

import json
import os

import pytest

from rig.errors import Damaged
from rig.observe.fingerprint import manifest_hashes
from rig.observe.gpu import summarize_gpu_samples
from rig.observe.server_metrics import parse_exposition, summarize_server_metrics

PAGE = ('# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} NaN\n'
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} +Inf\n'
        'vllm:num_requests_running{model_name="n"} 3\n')


def test_a_nan_or_infinite_gauge_is_left_out_of_its_scrape():
    assert parse_exposition(PAGE) == [("vllm:num_requests_running", {"model_name": "n"}, 3.0)]


def test_server_metrics_lines_that_are_not_scrapes_are_left_out(tmp_path):
    good = {"time": 2.0, "samples": [["vllm:num_requests_running", {"model_name": "m"}, 4.0]]}
    lines = ["5", "null", "[1, 2]", '{"time": NaN, "samples": []}', '{"time": "x", "samples": []}',
             json.dumps({"time": 1.0, "samples": [["vllm:num_requests_running", {"model_name": "m"}, "4"]]}),
             json.dumps({"time": 1.5, "samples": [["vllm:num_requests_running", {"model_name": 5}, 4.0]]}),
             '{"time": 1.7, "samples": [["vllm:num_requests_running", {}, Infinity]]}', json.dumps(good), '{"note": 5}']
    (tmp_path / "server.jsonl").write_text("\n".join(lines) + "\n")
    summary = summarize_server_metrics(tmp_path / "server.jsonl", (0.0, 10.0))
    assert summary.scrapes == 1 and summary.metrics["running_requests"].mean == 4.0 and summary.notes == []


def test_gpu_samples_that_are_not_samples_are_left_out(tmp_path):
    lines = ["5", '{"time": 1, "gpus": [{"index": "0", "power_w": 90}]}', '{"time": 1.5, "gpus": [{"index": 0, "power_w": "90"}]}',
            '{"time": 1.7, "gpus": [{"index": 0, "power_w": NaN}]}', '{"time": 1.8, "gpus": 3}',
            '{"time": 2, "gpus": [{"index": 0, "power_w": 100.0, "clock_events": []}]}']
    (tmp_path / "gpu.jsonl").write_text("\n".join(lines) + "\n")
    summary = summarize_gpu_samples(tmp_path / "gpu.jsonl", (0.0, 10.0))
    assert summary.samples == 1 and summary.gpus["0"].power_w.mean == 100.0


def test_a_fifo_or_dev_zero_in_the_manifest_folder_is_unreadable_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / "manifest-fifo.json")
    os.symlink("/dev/zero", tmp_path / "manifest-zero.json")
    (tmp_path / "manifest-1.json").write_text('{"adapters": []}')
    hashes = manifest_hashes(tmp_path)
    assert (hashes.manifests, hashes.unreadable) == (1, 2)


def test_a_fifo_in_place_of_a_samples_file_is_refused_in_one_line(tmp_path):
    os.mkfifo(tmp_path / "gpu.jsonl")
    with pytest.raises(Damaged):
        summarize_gpu_samples(tmp_path / "gpu.jsonl")
