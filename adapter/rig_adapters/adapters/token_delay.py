"""token_delay (test-only): sleep a fixed time in every model step of transformers serve (the
model's forward) or vLLM (each worker's execute_model).

One step produces one token per running request, so this is a known per-token slowdown:
comparisons must find it, and its ARMED line proves the runtime arms inside a real server
process. RIG_TOKEN_DELAY_MS is both the gate and the delay in milliseconds.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from rig_adapters.gates import env_float
from rig_adapters.registry import BY_NAME
from rig_adapters.runtime import AdapterContext, Refused

GATE = "RIG_TOKEN_DELAY_MS"


def _delay_ms() -> float:
    problem = BY_NAME["token_delay"].gate_problem(os.environ.get(GATE, ""))
    if problem:
        raise Refused(f"{problem} (milliseconds per step)")
    return env_float(GATE, 0.0)


def _sleep(ctx: AdapterContext, delay_ms: float) -> None:
    # A plain sleep releases the GIL, so the server's event loop keeps streaming meanwhile (a
    # busy-wait measured ~0.3 ms/token of extra, unintended slowdown on 2 cores).
    start = time.perf_counter()
    time.sleep(delay_ms / 1000.0)
    # What was really injected (sleep overshoot and GIL re-acquisition included), in the manifest.
    ctx.record_stat("injected_ms", (time.perf_counter() - start) * 1000)
    ctx.first_use(f"model step delayed by {delay_ms:g} ms")


def install_forward(ctx: AdapterContext) -> None:
    """transformers: every forward of the Llama model is one step."""
    delay_ms = _delay_ms()
    original = ctx.current

    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        _sleep(ctx, delay_ms)
        return original(self, *args, **kwargs)

    ctx.replace(forward, f"{delay_ms:g} ms per model step")


def install_execute_model(ctx: AdapterContext) -> None:
    """vLLM: Worker.execute_model runs once per engine step in every worker process. A step that
    schedules no tokens (an idle or bookkeeping call) produces no token and is not delayed."""
    delay_ms = _delay_ms()
    original = ctx.current

    @functools.wraps(original)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(scheduler_output, "total_num_scheduled_tokens", 1) > 0:
            _sleep(ctx, delay_ms)
        return original(self, scheduler_output, *args, **kwargs)

    ctx.replace(execute_model, f"{delay_ms:g} ms per engine step")
