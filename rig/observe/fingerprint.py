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
from pydantic import Field, JsonValue

from rig.errors import RigError
from rig.strict_yaml import read_regular
from rig.typed import Typed

FIELD_CLASSES = Path(__file__).with_name("fingerprint_fields.yaml")
ENVIRONMENT_PREFIXES = ("NCCL_", "GLOO_", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")
# Manifest fields that change with every process or boot and say nothing about what was armed.
VOLATILE_MANIFEST_FIELDS = {"pid", "ppid", "started", "time", "host", "first_use", "stats", "inherited_from_fork"}


class GpuFacts(Typed):
    """One GPU as NVML reports it (None: NVML could not read the field on this board)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    memory_total_mib: int | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    persistence_mode: str | None = None
    ecc_mode: str | None = None
    mig_mode: str | None = None
    compute_mode: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    applications_sm_mhz: int | None = None
    applications_mem_mhz: int | None = None
    max_sm_mhz: int | None = None
    auto_boost: bool | None = None
    vbios: str | None = None


class ManifestHashes(Typed):
    """Adapter manifests hashed without their per-process fields (`manifest_hashes`)."""

    manifests: int
    unreadable: int
    hashes: dict[str, int]  # sha256 -> processes that wrote that manifest
    digest: str


class CacheFiles(Typed):
    """The engine's compile caches when the boot started: their state and files per cache."""

    state: str | None = None
    log: str | None = None  # "reused" or "compiled", from the engine's boot log
    files: dict[str, int] = Field(default_factory=dict)


class Fingerprint(Typed):
    """What the host was when a boot became healthy, plus what the boot knows of itself (the image
    that runs, the adapter manifests, the compile caches). Compared field by field across boots."""

    taken_at: float
    hostname: str
    kernel: str
    os: str
    cpu: str
    cpu_count: int | None
    environment: dict[str, str]  # NCCL/GLOO/CUDA device settings, a secret-looking one redacted
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    gpu_count: int = 0
    gpus: list[GpuFacts] = Field(default_factory=list)
    nvml: str | None = None  # why NVML was not read (a host without NVIDIA GPUs)
    image_id: str | None = None
    image_digests: list[str] | None = None
    adapter_manifests: ManifestHashes | None = None
    compile_cache: CacheFiles | None = None
    slurm_nodes: str | None = None  # a Slurm boot's nodes, the head first (rig/boot/slurm.py)
    nodes: list[Fingerprint] = Field(default_factory=list)  # a Slurm boot: each node's own, by rank (hostname: its node)


class FingerprintDifference(Typed):
    """A field whose value is not the same in every boot's fingerprint."""

    field: str  # flattened: gpus.0.power_limit_w
    kind: str = Field(alias="class")  # condition, expected or informational (fingerprint_fields.yaml)
    values: dict[str, JsonValue]  # boot label -> its value (None where the field is absent)



def host_fingerprint(image_id: str | None = None, image_digests: list[str] | None = None,
                     adapter_manifests: ManifestHashes | None = None, compile_cache: CacheFiles | None = None) -> Fingerprint:
    """What this host is, now, with what the boot knows of itself (the image that runs, ...)."""
    return Fingerprint(taken_at=time.time(), hostname=platform.node(), kernel=platform.release(), os=platform.platform(),
                       cpu=cpu_model(), cpu_count=os.cpu_count(), environment=communication_environment(),
                       **gpu_fingerprint(), image_id=image_id, image_digests=image_digests,
                       adapter_manifests=adapter_manifests, compile_cache=compile_cache)


def communication_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """NCCL/GLOO/CUDA device settings by value; a secret-looking one (env_names.secret_looking) redacted."""
    from rig.env_names import secret_looking
    from rig.redaction import REDACTED

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
    """Driver, CUDA and per-GPU facts from NVML (Fingerprint's GPU fields, by name);
    {"gpu_count": 0, "nvml": why} without it."""
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


def _one_gpu(pynvml: Any, index: int) -> GpuFacts:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = _read(pynvml.nvmlDeviceGetPciInfo, handle)
    bus_id = None if pci is None else (pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId)
    memory = _read(pynvml.nvmlDeviceGetMemoryInfo, handle)
    limit = _read(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    default_limit = _read(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
    boost = _read(pynvml.nvmlDeviceGetAutoBoostedClocksEnabled, handle)
    return GpuFacts(
        index=index, name=_read(pynvml.nvmlDeviceGetName, handle), uuid=_read(pynvml.nvmlDeviceGetUUID, handle),
        pci_bus_id=bus_id, numa_node=numa_node(bus_id) if bus_id else None,
        memory_total_mib=None if memory is None else memory.total // (1 << 20),
        power_limit_w=None if limit is None else limit / 1000,
        default_power_limit_w=None if default_limit is None else default_limit / 1000,
        persistence_mode=_mode(_read(pynvml.nvmlDeviceGetPersistenceMode, handle)),
        ecc_mode=_mode(_read(pynvml.nvmlDeviceGetEccMode, handle)),
        mig_mode=_mode(_read(pynvml.nvmlDeviceGetMigMode, handle)),
        compute_mode=_read(pynvml.nvmlDeviceGetComputeMode, handle),
        pcie_gen_current=_read(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_gen_max=_read(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_width_current=_read(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_width_max=_read(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        applications_sm_mhz=_read(pynvml.nvmlDeviceGetApplicationsClock, handle, pynvml.NVML_CLOCK_SM),
        applications_mem_mhz=_read(pynvml.nvmlDeviceGetApplicationsClock, handle, pynvml.NVML_CLOCK_MEM),
        max_sm_mhz=_read(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
        auto_boost=None if boost is None else bool(boost[0]),
        vbios=_read(pynvml.nvmlDeviceGetVbiosVersion, handle),
    )


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _stable(item) for key, item in value.items() if key not in VOLATILE_MANIFEST_FIELDS}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


MANIFEST_MAX_BYTES = 4 << 20  # an adapter manifest is a few kB


def read_manifest(path: Path) -> dict[str, Any] | None:
    """One adapter manifest as a JSON object; None for one that cannot be (a FIFO or a device in its
    place, whatever the engine's container planted in the shared folder, too large, cut, not JSON)."""
    try:
        data = json.loads(read_regular(path, MANIFEST_MAX_BYTES))
    except (RigError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def manifest_hashes(directory: Path | str, pattern: str = "manifest-*.json") -> ManifestHashes:
    """sha256 of each adapter manifest without its per-process fields (pid, times, host, timing
    stats), so two boots that armed the same adapters the same way hash alike. One hash per
    distinct manifest with how many processes wrote it, and a digest over all of them."""
    counts: dict[str, int] = {}
    unreadable = 0
    for path in sorted(Path(directory).glob(pattern)):
        manifest = read_manifest(path)
        if manifest is None:
            unreadable += 1
            continue
        digest = hashlib.sha256(json.dumps(_stable(manifest), sort_keys=True).encode()).hexdigest()
        counts[digest] = counts.get(digest, 0) + 1
    overall = hashlib.sha256(json.dumps(sorted(counts.items())).encode()).hexdigest()
    return ManifestHashes(manifests=sum(counts.values()), unreadable=unreadable, hashes=dict(sorted(counts.items())),
                          digest=overall)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"gpus": [{"name": x}]} -> {"gpus.0.name": x}: one comparable leaf per field (a typed record
    is flattened as the JSON it is written as)."""
    if isinstance(value, Typed):
        value = value.model_dump(mode="json")
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


def fingerprint_differences(fingerprints: dict[str, Fingerprint]) -> list[FingerprintDifference]:
    """Every field whose value is not the same in all fingerprints (label -> fingerprint), with
    its class and each boot's value (None where absent), conditions first."""
    flat = {label: flatten(fingerprint) for label, fingerprint in fingerprints.items()}
    fields = sorted({field for leaves in flat.values() for field in leaves})
    order = {kind: rank for rank, kind in enumerate(field_classes())}
    differences = []
    for field in fields:
        values = {label: leaves.get(field) for label, leaves in flat.items()}
        if len({json.dumps(value, sort_keys=True) for value in values.values()}) > 1:
            differences.append(FingerprintDifference(field=field, kind=classify(field), values=values))
    return sorted(differences, key=lambda difference: order.get(difference.kind, len(order)))


def voiding_differences(differences: list[FingerprintDifference], accepted: list[str] | None = None) -> list[FingerprintDifference]:
    """The condition differences the user did not accept (`accepted` holds field globs, e.g. gpus.*.power_limit_w)."""
    accepted = accepted or []
    return [difference for difference in differences if difference.kind == "condition"
            and not any(fnmatch.fnmatchcase(difference.field, pattern) for pattern in accepted)]
