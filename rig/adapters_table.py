"""`rig adapters list`: the registry as a table (or JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict

from rig_adapters.registry import REGISTRY


def print_table(as_json: bool = False) -> None:
    if as_json:
        print(json.dumps([asdict(spec) for spec in REGISTRY], indent=1))
        return
    for spec in REGISTRY:
        print(f"{spec.name}{'  (test only)' if spec.test_only else ''}")
        print(f"  {spec.summary}")
        settings = f" (settings: {', '.join(spec.settings)})" if spec.settings else ""
        print(f"  gate        {spec.gate}{settings}; engines: {', '.join(spec.engines)}; recipes: {', '.join(spec.recipes) or 'any'}")
        for target in spec.targets:
            print(f"  target      {target.dotted}({', '.join(target.params)})")
        if spec.after:
            print(f"  order       wraps after {', '.join(spec.after)}")
        life = spec.lifecycle
        print(f"  works round {life.works_around}")
        print(f"  redundant   {life.redundant_when}")
        print(f"  last gain   {life.last_gain} [{life.measured_on}]")
        print()
