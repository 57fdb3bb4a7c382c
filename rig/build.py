"""`rig build <recipe>` / `make build <recipe>`: build the rendered Dockerfile on a pinned base."""

from __future__ import annotations

import os
import subprocess

from rig.errors import RigError
from rig.recipe import REPO_ROOT, load, split_ref
from rig.render import dockerfile_path, image_name, render

ALLOW_UNPINNED_ENV = "RIG_ALLOW_UNPINNED"


def source_commit() -> str:
    result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


def build(ref: str, allow_unpinned: bool = False, platform: str | None = None) -> int:
    resolved = load(ref)
    recipe = resolved.recipe
    where = f"recipes/{recipe.name}.yaml"
    if render([REPO_ROOT / "recipes" / f"{split_ref(ref)[0]}.yaml"], check=True):
        raise RigError(where, "(rendered files)", "docker/ or compose/ files are stale", "run `make render` and commit")
    platform = platform or resolved.topology.platform
    digest = recipe.image.digest_for(platform)
    if not digest and not (allow_unpinned or os.environ.get(ALLOW_UNPINNED_ENV) == "1"):
        raise RigError(where, f"image.digests.{platform}", "the base image is unpinned",
                       f"run `rig pin {recipe.name}`, or build anyway with {ALLOW_UNPINNED_ENV}=1")
    from rig.boot.compose import docker_client

    docker_client()  # one clear line when no engine answers, before anything is sent
    tag = f"{image_name(recipe)}:{os.environ.get('RIG_IMAGE_TAG', 'dev')}"
    command = ["docker", "build", "--platform", platform, "-f", str(dockerfile_path(recipe)), "-t", tag,
               "--build-arg", f"RIG_SOURCE_COMMIT={source_commit()}"]
    if digest:
        command += ["--build-arg", f"BASE_DIGEST={digest}"]
    print(" ".join(command + ["."]))
    return subprocess.run(command + ["."], cwd=REPO_ROOT, check=False).returncode
