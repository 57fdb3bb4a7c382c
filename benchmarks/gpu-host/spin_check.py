"""gpu_delay's spin on the GPU itself: what the adapter says it adds to a step, against an
independent measurement of the same step with and without it.

    python3 benchmarks/gpu-host/spin_check.py [RAW.json]   # on a CUDA host; prints one table

For each spin length the adapter's own injector (rig_adapters.adapters.gpu_delay.SpinInjector)
runs before a fixed GPU-bound step (a chain of bf16 matrix products) as it would before vLLM's:
calibration, then its in-place measurement over the first steps (`added_us`: median step period
with minus without the spin), then sampled spin times (`spin_us`). Independently, the same step is
then timed with and without the injector in interleaved blocks (events around each block); the
difference per step is the reference `added_us` should match. Two step lengths (8 and 16 products,
~200 and ~410 us), as tests/gpu/test_gpu_delay_gpu.py's 200 us step read the in-place figure 12%
high while the 410 us one agreed within 3-10%. With RAW.json, every step period of the in-place
measurement and every independent block time are written there, to see which estimator is right.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapter"))

import torch  # noqa: E402

import rig_adapters.adapters.gpu_delay as gpu_delay  # noqa: E402
from rig_adapters.adapters.gpu_delay import MEASURE_STEPS, SpinInjector  # noqa: E402

_measured_marks: list[list[tuple[bool, float]]] = []


def _keeping_marks(marks: list[tuple[bool, float]]) -> tuple[float, int, int] | None:
    _measured_marks.append(list(marks))  # the (spun, ms) marks the adapter's estimate is made from
    return _added_per_step(marks)


_added_per_step = gpu_delay.added_per_step
gpu_delay.added_per_step = _keeping_marks


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
    raw: list[dict[str, object]] = []
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; step = a chain of bf16 2048^3 products")
    print(f"{'products':>8} {'spin us':>8} {'cycles/us':>9} {'spin_us':>8} {'added_us (adapter)':>19} "
          f"{'added us (independent)':>23} {'marked every step':>17} {'marked every 8th':>16} {'step us':>8}")
    for products, asked in ((8, 50.0), (16, 50.0), (8, 22.0), (16, 22.0), (8, 100.0), (16, 100.0)):
        def work(products: int = products) -> None:
            b = a
            for _ in range(products):
                b = b @ a

        for _ in range(10000 * 8 // products):  # ~2 s of the step's load first: a steady state (see the test)
            work()
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
        # The same independent timing with an event recorded before every step (as the in-place
        # measurement records its marks), and before every 8th step: does the mark change what the
        # spin adds?
        marked = {}
        for every in (1, 8):
            counter = itertools.count()

            def step(spin: bool, every: int = every, counter=counter, cycles: int = injector.cycles, work=work) -> None:  # noqa: ANN001
                if next(counter) % every == 0:
                    torch.cuda.Event(enable_timing=True).record()
                if spin:
                    torch.cuda._sleep(cycles)
                work()
            with_mark = [(block_us(lambda step=step: step(False)), block_us(lambda step=step: step(True))) for _ in range(10)]
            marked[every] = statistics.median(spun_us for _, spun_us in with_mark) - statistics.median(plain_us for plain_us, _ in with_mark)
        added = ctx.stats.get("added_us", [float("nan")])[0]
        print(f"{products:8d} {asked:8.1f} {ctx.stats['calibrated_cycles_per_us'][0]:9.0f} {statistics.mean(ctx.stats['spin_us']):8.2f} "
              f"{added:19.2f} {independent:23.2f} {marked[1]:17.2f} {marked[8]:16.2f} {statistics.median(plain):8.1f}", flush=True)
        raw.append({"products": products, "asked_us": asked, "added_us": added, "independent_us": independent,
                    "marks": _measured_marks[-1] if _measured_marks else [], "plain_block_us": plain, "spun_block_us": spun,
                    "marked_every_step_us": marked[1], "marked_every_8th_us": marked[8]})
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(raw))


SPARE_STEPS = 256

if __name__ == "__main__":
    main()
