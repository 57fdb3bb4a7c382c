"""A host fingerprint per boot, and the differences between boots that void a comparison.

Two arms that ran under a different power limit, driver or PCIe link are not comparable,
however careful the statistics. The fingerprint records what the host was (NVML, sysfs, the
NCCL environment, CPU and kernel) plus what the caller knows (the image digest actually
running, the adapter manifests); `fingerprint_differences` names every field that differs and
classifies it with fingerprint_fields.yaml.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import platform
import time
from functools import cache
from pathlib import Path
from typing import Any

import yaml

FIELD_CLASSES = Path(__file__).with_name("fingerprint_fields.yaml")
ENVIRONMENT_PREFIXES = ("NCCL_", "GLOO_", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")
# Manifest fields that change with every process or boot and say nothing about what was armed.
VOLATILE_MANIFEST_FIELDS = {"pid", "ppid", "started", "time", "host", "first_use", "stats", "inherited_from_fork"}


def host_fingerprint(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What this host is, now; `extra` (image digest, adapter manifests, ...) is merged in as given."""
    fingerprint: dict[str, Any] = {"taken_at": time.time(), "hostname": platform.node(), "kernel": platform.release(),
                                   "os": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
                                   "environment": communication_environment()}
    fingerprint.update(gpu_fingerprint())
    fingerprint.update(extra or {})
    return fingerprint


def communication_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """NCCL/GLOO/CUDA device settings by value; a secret-looking one (grammar.secret_looking) redacted."""
    from rig.grammar import secret_looking
    from rig.secrets import REDACTED

    environ = os.environ if environ is None else environ
    return {key: REDACTED if secret_looking(key) else value
            for key, value in sorted(environ.items()) if key.startswith(ENVIRONMENT_PREFIXES)}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def numa_node(pci_bus_id: str) -> int | None:
    """NVML writes 00000000:3B:00.0; sysfs names the device 0000:3b:00.0. -1 (no NUMA) is kept as -1."""
    domain, rest = pci_bus_id.split(":", 1)
    path = Path("/sys/bus/pci/devices") / f"{int(domain, 16):04x}:{rest.lower()}" / "numa_node"
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def gpu_fingerprint() -> dict[str, Any]:
    """Driver, CUDA and per-GPU facts from NVML; {"gpu_count": 0, "nvml": why} without it."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # ImportError or NVMLError: a host without NVIDIA GPUs
        return {"gpu_count": 0, "gpus": [], "nvml": f"{type(error).__name__}: {error}"}
    try:
        cuda = _read(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        count = pynvml.nvmlDeviceGetCount()
        return {"driver_version": _read(pynvml.nvmlSystemGetDriverVersion),
                "cuda_driver_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
                "nvml_version": _read(pynvml.nvmlSystemGetNVMLVersion),
                "gpu_count": count, "gpus": [_one_gpu(pynvml, index) for index in range(count)]}
    finally:
        pynvml.nvmlShutdown()


def _read(call: Any, *args: Any) -> Any:
    import pynvml

    try:
        value = call(*args)
    except pynvml.NVMLError:
        return None
    return value.decode() if isinstance(value, bytes) else value


def _mode(pair: Any) -> str | None:
    """NVML returns (current, pending) for ECC and MIG; the current one is what ran."""
    if pair is None:
        return None
    current = pair[0] if isinstance(pair, list | tuple) else pair
    return "enabled" if current else "disabled"


def _one_gpu(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = _read(pynvml.nvmlDeviceGetPciInfo, handle)
    bus_id = None if pci is None else (pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId)
    memory = _read(pynvml.nvmlDeviceGetMemoryInfo, handle)
    limit = _read(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    default_limit = _read(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
    boost = _read(pynvml.nvmlDeviceGetAutoBoostedClocksEnabled, handle)
    return {
        "index": index, "name": _read(pynvml.nvmlDeviceGetName, handle), "uuid": _read(pynvml.nvmlDeviceGetUUID, handle),
        "pci_bus_id": bus_id, "numa_node": numa_node(bus_id) if bus_id else None,
        "memory_total_mib": None if memory is None else memory.total // (1 << 20),
        "power_limit_w": None if limit is None else limit / 1000,
        "default_power_limit_w": None if default_limit is None else default_limit / 1000,
        "persistence_mode": _mode(_read(pynvml.nvmlDeviceGetPersistenceMode, handle)),
        "ecc_mode": _mode(_read(pynvml.nvmlDeviceGetEccMode, handle)),
        "mig_mode": _mode(_read(pynvml.nvmlDeviceGetMigMode, handle)),
        "compute_mode": _read(pynvml.nvmlDeviceGetComputeMode, handle),
        "pcie_gen_current": _read(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_gen_max": _read(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "pcie_width_current": _read(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "pcie_width_max": _read(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "applications_sm_mhz": _read(pynvml.nvmlDeviceGetApplicationsClock, handle, pynvml.NVML_CLOCK_SM),
        "applications_mem_mhz": _read(pynvml.nvmlDeviceGetApplicationsClock, handle, pynvml.NVML_CLOCK_MEM),
        "max_sm_mhz": _read(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "auto_boost": None if boost is None else bool(boost[0]),
        "vbios": _read(pynvml.nvmlDeviceGetVbiosVersion, handle),
    }


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _stable(item) for key, item in value.items() if key not in VOLATILE_MANIFEST_FIELDS}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def manifest_hashes(directory: Path | str, pattern: str = "manifest-*.json") -> dict[str, Any]:
    """sha256 of each adapter manifest without its per-process fields (pid, times, host, timing
    stats), so two boots that armed the same adapters the same way hash alike. One hash per
    distinct manifest with how many processes wrote it, and a digest over all of them."""
    counts: dict[str, int] = {}
    unreadable = 0
    for path in sorted(Path(directory).glob(pattern)):
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError):
            unreadable += 1
            continue
        digest = hashlib.sha256(json.dumps(_stable(manifest), sort_keys=True).encode()).hexdigest()
        counts[digest] = counts.get(digest, 0) + 1
    overall = hashlib.sha256(json.dumps(sorted(counts.items())).encode()).hexdigest()
    return {"manifests": sum(counts.values()), "unreadable": unreadable, "hashes": dict(sorted(counts.items())),
            "digest": overall}


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"gpus": [{"name": x}]} -> {"gpus.0.name": x}: one comparable leaf per field."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(index), item) for index, item in enumerate(value))
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    if not flat and prefix:
        flat[prefix] = value  # an empty dict or list is a value too
    return flat


@cache
def field_classes() -> dict[str, list[str]]:
    return yaml.safe_load(FIELD_CLASSES.read_text())


def classify(field: str) -> str:
    for kind, patterns in field_classes().items():
        if any(fnmatch.fnmatchcase(field, pattern) for pattern in patterns):
            return kind
    return "informational"


def fingerprint_differences(fingerprints: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every field whose value is not the same in all fingerprints (label -> fingerprint), as
    {"field", "class", "values": {label: value or None where absent}}, conditions first."""
    flat = {label: flatten(fingerprint) for label, fingerprint in fingerprints.items()}
    fields = sorted({field for leaves in flat.values() for field in leaves})
    order = {kind: rank for rank, kind in enumerate(field_classes())}
    differences = []
    for field in fields:
        values = {label: leaves.get(field) for label, leaves in flat.items()}
        if len({json.dumps(value, sort_keys=True) for value in values.values()}) > 1:
            differences.append({"field": field, "class": classify(field), "values": values})
    return sorted(differences, key=lambda difference: order.get(difference["class"], len(order)))


def voiding_differences(differences: list[dict[str, Any]], accepted: list[str] | None = None) -> list[dict[str, Any]]:
    """The condition differences the user did not accept (`accepted` holds field globs, e.g. gpus.*.power_limit_w)."""
    accepted = accepted or []
    return [difference for difference in differences if difference["class"] == "condition"
            and not any(fnmatch.fnmatchcase(difference["field"], pattern) for pattern in accepted)]
