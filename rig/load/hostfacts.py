"""Host facts stamped on every result: what ran where."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version

from rig.load.provenance import HostFacts
from rig.observe.fingerprint import cpu_model


def host_facts() -> HostFacts:
    facts = HostFacts(hostname=platform.node(), cpu=cpu_model(), cpu_count=os.cpu_count(),
                      python=platform.python_version(), platform=platform.platform())
    try:  # by metadata: importing locust would gevent-monkey-patch this process
        facts.locust = version("locust")
    except PackageNotFoundError:
        pass
    if shutil.which("nvidia-smi"):
        try:  # a wedged GPU can hang nvidia-smi: the run's facts say so instead of the run hanging
            result = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                    capture_output=True, text=True, check=False, timeout=30)
            facts.gpus = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        except subprocess.TimeoutExpired:
            facts.gpus = ["unknown: nvidia-smi did not answer within 30 s"]
    return facts
