"""The container lab as rig sees it: the local registry and the per-machine pins of its images.

`make lab` (lab/lab.sh) starts a Docker engine and a registry on 127.0.0.1:5000 and pushes a
base image built from Debian packages. That image's digest differs on every machine (`docker
import` stamps a creation time), so it is never committed: `rig pin` writes a lab image's
digests to .rig/lab/pins.yaml (gitignored) and `rig build` reads them from there. A recipe whose
image.repository starts with the lab registry is a lab recipe; every other recipe is pinned in
its own file, as before.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from rig.atomic import write_text_atomic
from rig.deploy.recipe_model import BaseImage
from rig.paths import REPO_ROOT
from rig.strict_yaml import load_yaml_file

LAB_REGISTRY = "127.0.0.1:5000"
LAB_DIR = Path(os.environ.get("RIG_LAB_DIR", REPO_ROOT / ".rig" / "lab"))
PINS_FILE = LAB_DIR / "pins.yaml"


def is_lab_image(repository: str) -> bool:
    return repository.startswith(LAB_REGISTRY + "/")


def _pins() -> dict[str, dict[str, str]]:
    if not PINS_FILE.exists():
        return {}
    return load_yaml_file(PINS_FILE, 1 << 20, fix=f"delete {PINS_FILE} and run `rig pin` again") or {}


def lab_digests(image: BaseImage) -> dict[str, str]:
    """The digests `rig pin` wrote on this machine for a lab image ({} when not pinned yet)."""
    return dict(_pins().get(f"{image.repository}:{image.tag}", {}))


def write_lab_digests(image: BaseImage, digests: dict[str, str]) -> Path:
    pins = _pins()
    pins[f"{image.repository}:{image.tag}"] = dict(sorted(digests.items()))
    PINS_FILE.parent.mkdir(parents=True, exist_ok=True)
    header = "# Written by `rig pin` for images in the lab registry (make lab); per machine, never committed.\n"
    write_text_atomic(PINS_FILE, header + yaml.safe_dump(pins, sort_keys=True))
    return PINS_FILE


STANDIN_TAG = "standin-lab"  # pushed by lab/lab.sh: the lab base plus tests/standins/<engine>


def standin_reference(repository: str) -> str:
    """Where the lab serves the stand-in for `repository`. dockerd's registry mirror (set by
    lab/lab.sh) makes `FROM <repository>@<digest>` pull it from there."""
    return f"{LAB_REGISTRY}/{repository}:{STANDIN_TAG}"
