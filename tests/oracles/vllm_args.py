"""vLLM's own `vllm serve` argument parser, imported from the release wheel without installing vLLM.

vLLM builds its parser from EngineArgs' dataclass fields (vllm/engine/arg_utils.py) and the
OpenAI server's options (vllm/entrypoints/openai/cli_args.py make_arg_parser); unlike SGLang's it
cannot be read from the source alone, so the real modules are imported: the wheel is unpacked
into rig's cache (its compiled extensions left out: building the parser loads none of them) and
the pure-Python modules its import chain needs beyond rig's environment are installed beside it,
pinned, with `pip --target`. Building a parser constructs EngineArgs' defaults, whose device
config asks the current platform: the CPU platform is set, so no GPU is needed. The import takes
~30 s on 2 cores, so the parser runs once per call on a list of argvs, in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from rig import paths
from rig.drift import fetch_wheel
from rig.errors import RigError

# What vLLM 0.24.0's `make_arg_parser` imports that rig's environment does not have (found by importing it).
IMPORT_DEPENDENCIES = ("aiohappyeyeballs==2.7.1", "aiohttp==3.14.5", "aiosignal==1.4.0", "cachetools==8.0.3", "cbor2==6.3.0",
                       "cloudpickle==3.1.3", "frozenlist==1.8.0", "multidict==7.2.1", "openai-harmony==0.0.8",
                       "partial-json-parser==0.2.1.1.post7", "propcache==0.5.4", "py-cpuinfo==9.0.0", "pybase64==1.5.1",
                       "uvloop==0.23.0", "yarl==1.25.1")

_CHILD = """
import json, sys
sys.path[:0] = sys.argv[1:3]
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
platforms._current_platform = CpuPlatform()
from vllm.entrypoints.openai.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
results = []
for argv in json.loads(sys.stdin.read()):
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    try:
        results.append({"ok": True, "args": {k: v for k, v in vars(parser.parse_args(argv)).items()
                                             if isinstance(v, (str, int, float, bool, type(None)))}})
    except SystemExit:
        results.append({"ok": False, "args": {}})
print(json.dumps(results))
"""


def _unpacked(release: str) -> tuple[Path, Path]:
    root = paths.cache_dir() / "oracles" / f"vllm-{release}"
    source, deps = root / "source", root / "deps"
    if not (source / "vllm" / "__init__.py").exists():
        with zipfile.ZipFile(fetch_wheel("vllm", release)) as wheel:
            wheel.extractall(source, [n for n in wheel.namelist() if n.endswith(".py") or n.endswith(".json")])
    if not (deps / ".complete").exists():
        result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(deps),
                                 *IMPORT_DEPENDENCIES], capture_output=True, text=True, check=False, timeout=900)
        if result.returncode != 0:
            raise RigError("pip", "vllm oracle", (result.stderr.strip().splitlines() or ["failed"])[-1],
                           "check that the package index is reachable")
        (deps / ".complete").write_text("")
    return source, deps


def serve_args(argv: list[str]) -> list[str]:
    """What vLLM's parser sees: the arguments after `serve`."""
    return argv[argv.index("serve") + 1:]


def parse_vllm(release: str, argvs: list[list[str]]) -> list[dict | None]:
    """Each argv (after `serve`) as vLLM's parser reads it (its scalar options), or None where it refuses it."""
    source, deps = _unpacked(release)
    result = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(deps)], input=json.dumps(argvs),
                            capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0:
        raise RigError("vllm oracle", release, (result.stderr.strip().splitlines() or ["failed"])[-1],
                       "extend tests/oracles/vllm_args.py for this release")
    return [entry["args"] if entry["ok"] else None for entry in json.loads(result.stdout.strip().splitlines()[-1])]
