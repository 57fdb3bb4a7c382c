"""Host fingerprints: the CPU box's own fingerprint notes the missing NVML; differences between
synthetic boots are listed field by field and classified, a condition (power limit, driver)
voids unless accepted; adapter manifests hash alike across processes and boots."""

from __future__ import annotations

import copy
import json

from rig.observe.fingerprint import (
    Fingerprint,
    communication_environment,
    fingerprint_differences,
    host_fingerprint,
    manifest_hashes,
    voiding_differences,
)

GPU = {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1", "pci_bus_id": "00000000:18:00.0", "numa_node": 0,
       "memory_total_mib": 143771, "power_limit_w": 700.0, "default_power_limit_w": 700.0, "persistence_mode": "enabled",
       "ecc_mode": "enabled", "mig_mode": "disabled", "compute_mode": 0, "pcie_gen_current": 5, "pcie_gen_max": 5,
       "pcie_width_current": 16, "pcie_width_max": 16, "applications_sm_mhz": 1980, "applications_mem_mhz": 3201,
       "max_sm_mhz": 1980, "auto_boost": None, "vbios": "96.00.AF.00.01"}
BASE = {"taken_at": 1.0, "hostname": "box-a", "kernel": "6.8.0", "cpu": "Xeon", "cpu_count": 128,
        "environment": {"NCCL_P2P_LEVEL": "NVL"}, "driver_version": "580.95.05", "cuda_driver_version": "13.0",
        "gpu_count": 2, "gpus": [GPU, {**GPU, "index": 1, "uuid": "GPU-2", "pci_bus_id": "00000000:2A:00.0"}],
        "image_digest": "sha256:aaa"}


def boot(**changes) -> dict:
    fingerprint = copy.deepcopy(BASE)
    for field, value in changes.items():
        target = fingerprint
        *parents, leaf = field.split("__")
        for parent in parents:
            target = target[int(parent)] if isinstance(target, list) else target[parent]
        target[leaf] = value
    return fingerprint


def test_this_hosts_fingerprint_has_the_host_facts_and_notes_a_missing_nvml():
    fingerprint = host_fingerprint(image_id="sha256:bbb")
    assert fingerprint.cpu_count >= 1 and fingerprint.kernel and fingerprint.image_id == "sha256:bbb"
    assert fingerprint.gpu_count == len(fingerprint.gpus)
    if fingerprint.gpu_count == 0:
        assert fingerprint.nvml is not None
    assert Fingerprint.model_validate_json(fingerprint.model_dump_json()) == fingerprint  # it is stored in boot.json


def test_only_communication_variables_are_kept():
    environ = {"NCCL_IB_HCA": "mlx5", "GLOO_SOCKET_IFNAME": "eth0", "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root",
               "RIG_API_KEY": "secret"}
    assert communication_environment(environ) == {"CUDA_VISIBLE_DEVICES": "0,1", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5"}


def test_identical_boots_differ_only_in_expected_fields():
    differences = fingerprint_differences({"before": boot(), "after": boot(taken_at=2.0, hostname="box-b")})
    assert {d.field: d.kind for d in differences} == {"taken_at": "expected", "hostname": "expected"}
    assert voiding_differences(differences) == []


def test_a_planted_power_limit_and_driver_void_unless_accepted():
    fingerprints = {"before": boot(), "after": boot(gpus__1__power_limit_w=600.0, driver_version="575.57.08",
                                                     environment={"NCCL_P2P_LEVEL": "SYS"}, gpus__0__pcie_gen_current=1),
                    "control": boot()}
    differences = fingerprint_differences(fingerprints)
    classes = {d.field: d.kind for d in differences}
    assert classes == {"driver_version": "condition", "gpus.1.power_limit_w": "condition",
                       "environment.NCCL_P2P_LEVEL": "informational", "gpus.0.pcie_gen_current": "expected"}
    assert [d.kind for d in differences][:2] == ["condition", "condition"]  # conditions first
    power = next(d for d in differences if d.field == "gpus.1.power_limit_w")
    assert power.values == {"before": 700.0, "after": 600.0, "control": 700.0}
    assert {d.field for d in voiding_differences(differences)} == {"driver_version", "gpus.1.power_limit_w"}
    assert [d.field for d in voiding_differences(differences, accepted=["gpus.*.power_limit_w"])] == ["driver_version"]


def test_a_missing_gpu_and_mig_ecc_persistence_pcie_are_conditions():
    fewer = boot(gpu_count=1)
    fewer["gpus"] = fewer["gpus"][:1]
    changed = boot(gpus__0__mig_mode="enabled", gpus__0__ecc_mode="disabled", gpus__0__persistence_mode="disabled",
                   gpus__0__pcie_width_max=8, gpus__0__name="NVIDIA H100 80GB HBM3")
    differences = fingerprint_differences({"a": boot(), "b": fewer, "c": changed})
    voiding = {d.field for d in voiding_differences(differences)}
    assert {"gpu_count", "gpus.1.name", "gpus.1.power_limit_w", "gpus.0.mig_mode", "gpus.0.ecc_mode",
            "gpus.0.persistence_mode", "gpus.0.pcie_width_max", "gpus.0.name"} <= voiding
    missing = next(d for d in differences if d.field == "gpus.1.name")
    assert missing.values["b"] is None


def test_adapter_manifests_hash_alike_across_processes_and_boots(tmp_path):
    def manifest(pid: int, started: float, state: str) -> dict:
        return {"schema": 1, "host": f"host-{pid}", "pid": pid, "ppid": 1, "started": started, "argv": ["python"],
                "adapters": {"shared_pad_k": {"state": state, "first_use": started + 5, "gate": {"DSV41_SHARED_PAD_K": "1"},
                                              "stats": {"pad_s": {"count": pid, "mean": 0.1}}, "layers_patched": ["a"]}}}

    for boot_dir, states in (("one", ["armed", "armed"]), ("two", ["armed", "armed"]), ("three", ["armed", "refused"])):
        (tmp_path / boot_dir).mkdir()
        for pid, state in enumerate(states, start=100 if boot_dir == "one" else 200):
            (tmp_path / boot_dir / f"manifest-h-{pid}.json").write_text(json.dumps(manifest(pid, pid * 10.0, state)))
    (tmp_path / "one" / "manifest-h-999.json").write_text('{"cut')
    one, two, three = (manifest_hashes(tmp_path / name) for name in ("one", "two", "three"))
    assert one.manifests == 2 and one.unreadable == 1 and list(one.hashes.values()) == [2]
    assert one.digest == two.digest
    assert three.digest != one.digest and len(three.hashes) == 2
    differences = fingerprint_differences({"a": {"adapter_manifests": one}, "b": {"adapter_manifests": three}})
    assert "adapter_manifests.digest" in {d.field for d in differences}
