"""token_delay (test-only): sleep a fixed time in every model forward of transformers serve.

One forward produces one token per running request, so this is a known per-token slowdown:
comparisons on tiny-cpu must find it, and its ARMED line proves the runtime arms inside a
real server process. RIG_TOKEN_DELAY_MS is both the gate and the delay in milliseconds.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from rig_adapters.gates import env_float
from rig_adapters.runtime import AdapterContext, Refused

GATE = "RIG_TOKEN_DELAY_MS"


def install_forward(ctx: AdapterContext) -> None:
    try:
        delay_ms = env_float(GATE, 0.0)
    except ValueError as error:
        raise Refused(str(error)) from None
    if delay_ms <= 0:
        raise Refused(f"{GATE} must be a positive number of milliseconds")
    delay_s = delay_ms / 1000.0
    original = ctx.current

    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        # A plain sleep releases the GIL, so the server's event loop keeps streaming meanwhile (a
        # busy-wait measured ~0.3 ms/token of extra, unintended slowdown on 2 cores).
        start = time.perf_counter()
        time.sleep(delay_s)
        # What was really injected (sleep overshoot and GIL re-acquisition included), in the manifest.
        ctx.record_stat("injected_ms", (time.perf_counter() - start) * 1000)
        ctx.first_use(f"model step delayed by {delay_ms:g} ms")
        return original(self, *args, **kwargs)

    ctx.replace(forward, f"{delay_ms:g} ms per model step")
