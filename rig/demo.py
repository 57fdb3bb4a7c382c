"""`make demo`: the project's main job end to end on the embedded default, tiny-cpu."""

from __future__ import annotations

from rig.boot import driver_for
from rig.chat import stream_chat
from rig.recipe import load

DEMO_RECIPE = "tiny-cpu"
DEMO_PROMPT = "Explain in one sentence why zero-padding K from 576 to 640 can make a GEMM faster."


def run_demo() -> int:
    resolved = load(DEMO_RECIPE)
    driver = driver_for(resolved)
    record = driver.up(resolved)
    try:
        print(f"served model: {record.served_model}  ({record.base_url}, boot {record.boot_id}, "
              f"healthy after {record.healthy_after_s:.1f}s)")
        print(f"prompt: {DEMO_PROMPT}\nanswer (streamed): ", end="")
        result = stream_chat(record.base_url, record.served_model or "", DEMO_PROMPT, max_tokens=48)
        print(f"[{result['chunks']} chunks, usage {result['usage']}, ttft {result['ttft_s']:.3f}s]")
    finally:
        driver.down(record)
        print(f"{record.ref} stopped; boot log: {record.log_path}")
    return 0
