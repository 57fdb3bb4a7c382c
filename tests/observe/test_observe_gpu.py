"""GPU telemetry: absence of NVML or GPUs is noted once; a window of samples reduces to clocks,
power, energy and clock-event reasons; on a real GPU (`pytest -m gpu`) a matmul load raises the
power above idle, the energy counter grows and the clocks read > 0."""

from __future__ import annotations

import json
import time

import pytest

from rig.observe.gpu import GpuSampler, decode_clock_events, summarize_gpu_samples


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def nvml_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(nvml_available(), reason="checks a host without NVML")
def test_a_host_without_nvml_is_noted_once_and_nothing_is_sampled(tmp_path):
    with GpuSampler(tmp_path / "gpu.jsonl", interval_s=0.05) as sampler:
        time.sleep(0.2)
    assert sampler.note and sampler.note.startswith("no GPU telemetry")
    assert sampler.samples == 0
    lines = (tmp_path / "gpu.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["note"] == sampler.note
    summary = summarize_gpu_samples(tmp_path / "gpu.jsonl", (0, time.time()), output_tokens=100)
    assert summary.samples == 0 and summary.gpus == {} and summary.energy_j is None
    assert summary.notes == [sampler.note]


def test_clock_event_bits_decode_to_names():
    assert decode_clock_events(0) == []
    assert decode_clock_events(0x1 | 0x4) == ["gpu_idle", "sw_power_cap"]
    assert decode_clock_events(0x40 | 0x1000) == ["hw_thermal_slowdown", "unknown_0x1000"]


def gpu(index: int, power: float, energy: float | None, sm: int, mask: int) -> dict:
    return {"index": index, "sm_mhz": sm, "mem_mhz": 2619, "power_w": power, "power_limit_w": 700.0, "temp_c": 40,
            "util_gpu_pct": 100, "util_mem_pct": 50, "energy_mj": energy, "clock_event_mask": mask,
            "clock_events": decode_clock_events(mask)}


def test_a_window_reduces_to_clocks_power_energy_and_reasons(tmp_path):
    path = tmp_path / "gpu.jsonl"
    lines = []
    for second in range(6):  # GPU 0 has an energy counter, GPU 1 only power readings
        mask0 = 0x4 if second == 3 else 0x1 if second == 0 else 0
        lines.append({"time": 100.0 + second, "gpus": [gpu(0, 500.0, 1_000_000.0 + 500_000 * second, 1980 - 10 * second, mask0),
                                                        gpu(1, 300.0, None, 1755, 0x40 if second == 5 else 0)]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"time": 1')
    summary = summarize_gpu_samples(path, (100.0, 104.0), output_tokens=1000)
    gpu0, gpu1 = summary.gpus["0"], summary.gpus["1"]
    assert summary.samples == 5
    assert gpu0.energy_j == pytest.approx(2000) and gpu0.energy_source == "energy counter"
    assert gpu1.energy_j == pytest.approx(1200) and gpu1.energy_source == "power integral"
    assert gpu0.sm_mhz.model_dump() == {"mean": 1960, "min": 1940, "max": 1980}
    assert gpu0.clock_events == ["sw_power_cap"]  # gpu_idle at t=100 does not count
    assert gpu1.clock_events == []  # hw_thermal_slowdown came after the window
    assert summary.clock_events == ["sw_power_cap"]
    assert summary.energy_j == pytest.approx(3200)
    assert summary.j_per_output_token == pytest.approx(3.2)
    assert summary.power_w_mean_total == pytest.approx(800)


def matmul_load(seconds: float) -> int:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    steps, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(20):
            a = (a @ b) * 1e-2
        torch.cuda.synchronize()
        steps += 20
    return steps


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_a_real_gpu_load_moves_power_energy_and_clocks(tmp_path):
    import torch

    torch.cuda.init()
    index = torch.cuda.current_device()
    path = tmp_path / "gpu.jsonl"
    with GpuSampler(path, interval_s=0.2) as sampler:
        time.sleep(0.3)
        idle = (time.time(), time.time() + 2.0)
        time.sleep(2.3)
        matmul_load(1.0)  # let clocks and power settle before the measured part
        loaded_start = time.time()
        steps = matmul_load(5.0)
        loaded = (loaded_start, time.time())
        time.sleep(0.3)
    assert sampler.note is None, sampler.note
    idle_summary = summarize_gpu_samples(path, idle)
    flops = steps * 2 * 8192**3
    # A token-equivalent: one output token of a 37B-active-parameter MoE costs about 2 * 37e9 FLOPs.
    load_summary = summarize_gpu_samples(path, loaded, output_tokens=int(flops / (2 * 37e9)))
    idle_gpu, load_gpu = idle_summary.gpus[str(index)], load_summary.gpus[str(index)]
    figures = {"idle_power_w": idle_gpu.power_w, "load_power_w": load_gpu.power_w, "power_limit_w": load_gpu.power_limit_w,
               "idle_sm_mhz": idle_gpu.sm_mhz, "load_sm_mhz": load_gpu.sm_mhz, "load_mem_mhz": load_gpu.mem_mhz,
               "load_temp_c": load_gpu.temp_c, "load_util_gpu_pct": load_gpu.util_gpu_pct,
               "idle_energy_j": idle_gpu.energy_j, "load_energy_j": load_gpu.energy_j, "energy_source": load_gpu.energy_source,
               "load_seconds": loaded[1] - loaded[0], "tflops": flops / (loaded[1] - loaded[0]) / 1e12,
               "j_per_token_equivalent": load_summary.j_per_output_token, "token_equivalents": load_summary.output_tokens,
               "clock_events_under_load": load_gpu.clock_events, "samples_under_load": load_gpu.samples}
    print("GPU TELEMETRY " + json.dumps(figures, default=lambda record: record.model_dump()))
    assert load_gpu.samples >= 15
    assert load_gpu.power_w.mean > idle_gpu.power_w.mean + 50
    assert load_gpu.energy_source == "energy counter" and load_gpu.energy_j > idle_gpu.energy_j > 0
    # The counter's joules agree with the mean power times the time it covered.
    assert load_gpu.energy_j == pytest.approx(load_gpu.power_w.mean * (loaded[1] - loaded[0]), rel=0.15)
    assert load_gpu.sm_mhz.min > 0 and load_gpu.mem_mhz.min > 0
    assert load_gpu.util_gpu_pct.mean > 80
