"""gpu_delay's spin on the GPU itself: what the adapter says it adds to a step, against an
independent measurement of the same step with and without it.

    python3 benchmarks/h200/spin_check.py          # on a CUDA host; prints one table

For each spin length the adapter's own injector (rig_adapters.adapters.gpu_delay.SpinInjector)
runs before a fixed GPU-bound step (a chain of bf16 matrix products) as it would before vLLM's:
calibration, then its in-place measurement over the first steps (`added_us`: median step period
with minus without the spin), then sampled spin times (`spin_us`). Independently, the same step is
then timed with and without the injector in interleaved blocks (events around each block); the
difference per step is the reference `added_us` should match.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapter"))

import torch  # noqa: E402

from rig_adapters.adapters.gpu_delay import MEASURE_STEPS, SpinInjector  # noqa: E402


class _Context:
    """The evidence hooks SpinInjector calls, kept in memory."""

    def __init__(self) -> None:
        self.stats: dict[str, list[float]] = {}
        self.notes: list[str] = []

    def record_stat(self, name: str, value: float) -> None:
        self.stats.setdefault(name, []).append(value)

    def first_use(self, detail: str) -> None:
        self.notes.append(detail)

    def note(self, detail: str) -> None:
        self.notes.append(detail)


def block_us(step, steps: int = 200) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / steps


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("spin_check.py: needs a CUDA GPU")
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)

    def work() -> None:
        b = a
        for _ in range(16):
            b = b @ a

    for _ in range(50):
        work()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; step = 16 bf16 2048^3 products")
    print(f"{'spin us':>8} {'cycles/us':>9} {'spin_us':>8} {'added_us (adapter)':>19} {'added us (independent)':>23} {'step us':>8}")
    for asked in (22.0, 44.0, 100.0):
        ctx = _Context()
        injector = SpinInjector(ctx, torch, asked)  # type: ignore[arg-type]
        for _ in range(MEASURE_STEPS + SPARE_STEPS):  # the adapter's own measurement, then sampled spins
            injector.inject()
            work()
        plain, spun = [], []
        for _ in range(10):  # interleaved blocks, medians
            plain.append(block_us(work))
            spun.append(block_us(lambda injector=injector: (injector.inject(), work())))
        torch.cuda.synchronize()
        injector.inject()
        independent = statistics.median(spun) - statistics.median(plain)
        added = ctx.stats.get("added_us", [float("nan")])[0]
        print(f"{asked:8.1f} {ctx.stats['calibrated_cycles_per_us'][0]:9.0f} {statistics.mean(ctx.stats['spin_us']):8.2f} "
              f"{added:19.2f} {independent:23.2f} {statistics.median(plain):8.1f}")


SPARE_STEPS = 256

if __name__ == "__main__":
    main()
