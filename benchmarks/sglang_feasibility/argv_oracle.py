"""Compare rig's reading of SGLang's launch grammar (tests/oracles/engine_args.py) with SGLang's real parser.

The real parser comes from importing `sglang.srt.server_args` from the unpacked wheel and calling
`ServerArgs.add_cli_args` on an argparse parser. That import needs torch (rig's CPU torch serves)
and some of SGLang's light dependencies, installed into a separate folder so rig's own environment
stays as it is:

    .venv/bin/pip install --target /tmp/oracle-deps ipython orjson pybase64 aiohttp triton partial_json_parser dill
    mkdir /tmp/sgl && cd /tmp/sgl && unzip -q ~/.cache/rig/engines/sglang-0.5.23/sglang-0.5.23-*.whl
    .venv/bin/python benchmarks/sglang_feasibility/argv_oracle.py /tmp/sgl /tmp/oracle-deps ~/.cache/rig/engines/sglang-0.5.23/*.whl

Prints the flags only one side has and, per shared flag, every difference in dest, nargs, action
class, choices, type and required.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIELDS = ("dest", "nargs", "cls", "choices", "type", "required")
REAL = """
import argparse, json, sys
sys.path.insert(0, sys.argv[1]); sys.path.append(sys.argv[2])
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(); ServerArgs.add_cli_args(parser)
print(json.dumps([{"flags": a.option_strings, "dest": a.dest, "nargs": a.nargs, "cls": type(a).__name__,
    "choices": sorted(map(str, a.choices)) if a.choices is not None else None,
    "type": getattr(a.type, "__name__", None), "required": a.required} for a in parser._actions]))
"""


def rigs(wheel: Path) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from oracles.engine_args import sglang_grammar

    return [{"flags": a.option_strings, "dest": a.dest, "nargs": a.nargs, "cls": type(a).__name__,
             "choices": sorted(map(str, a.choices)) if a.choices is not None else None,
             "type": getattr(a.type, "__name__", None), "required": a.required}
            for a in sglang_grammar(wheel).parser._actions]


def main() -> None:
    source, deps, wheel = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    out = subprocess.run([sys.executable, "-c", REAL, source, deps], capture_output=True, text=True, check=True).stdout
    real = {tuple(sorted(r["flags"])): r for r in json.loads(out.strip().splitlines()[-1])}
    mine = {tuple(sorted(r["flags"])): r for r in rigs(wheel)}
    print(f"real parser: {len(real)} actions; rig's reading: {len(mine)} actions")
    print("only in the real parser:", sorted(set(real) - set(mine)) or "none")
    print("only in rig's reading:", sorted(set(mine) - set(real)) or "none")
    differences = 0
    for flags in sorted(set(real) & set(mine)):
        for field in FIELDS:
            if real[flags][field] != mine[flags][field]:
                differences += 1
                shown = real[flags][field] if field != "choices" else f"{len(real[flags][field] or [])} choices"
                print(f"  {'/'.join(flags)}: {field}: real {shown!r}, rig {mine[flags][field]!r}")
    print(f"{len(set(real) & set(mine))} shared actions, {differences} field differences")


if __name__ == "__main__":
    main()
