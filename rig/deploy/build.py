"""`rig build <recipe>` / `make build <recipe>`: build the rendered Dockerfile on a pinned base."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from rig import grammar
from rig.deploy.pins import is_lab_image, lab_digests
from rig.deploy.recipe import load, split_ref
from rig.deploy.render import dockerfile_path, image_name, render
from rig.errors import RigError
from rig.paths import REPO_ROOT

ALLOW_UNPINNED_ENV = "RIG_ALLOW_UNPINNED"


def source_commit() -> str:
    result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


def context_size(root: Path = REPO_ROOT) -> tuple[int, int]:
    """(files, bytes) the daemon is sent: the context after .dockerignore, read as Docker reads it."""
    from docker.utils.build import exclude_paths

    ignore = root / ".dockerignore"
    patterns = [line.strip() for line in ignore.read_text().splitlines() if line.strip() and not line.startswith("#")] \
        if ignore.exists() else []
    files = total = 0
    for relative in exclude_paths(str(root), patterns):
        path = root / relative
        if path.is_file() and not path.is_symlink():
            files += 1
            total += path.stat().st_size
    return files, total


def builder_env() -> dict[str, str]:
    """The classic builder where BuildKit's CLI (buildx) is absent, as on the container lab."""
    if "DOCKER_BUILDKIT" in os.environ:
        return {}
    buildx = subprocess.run(["docker", "buildx", "version"], capture_output=True, check=False)
    return {} if buildx.returncode == 0 else {"DOCKER_BUILDKIT": "0"}


def build(ref: str, allow_unpinned: bool = False, platform: str | None = None) -> int:
    resolved = load(ref)
    recipe = resolved.recipe
    where = f"recipes/{recipe.name}.yaml"
    if render([REPO_ROOT / "recipes" / f"{split_ref(ref)[0]}.yaml"], check=True):
        raise RigError(where, "(rendered files)", "docker/ or compose/ files are stale", "run `make render` and commit")
    platform = platform or resolved.topology.platform
    if platform not in ("linux/amd64", "linux/arm64"):
        raise RigError("command line", "--platform", f"{platform!r} is not a platform rig builds", "pass linux/amd64 or linux/arm64")
    image_tag = os.environ.get(grammar.IMAGE_TAG_VARIABLE, grammar.DEFAULT_IMAGE_TAG)
    try:
        grammar.tag(image_tag)
    except ValueError as error:
        raise RigError("environment", grammar.IMAGE_TAG_VARIABLE, str(error),
                       f"set {grammar.IMAGE_TAG_VARIABLE} to a plain tag, e.g. v2") from None
    image = recipe.container_image("build")
    lab = is_lab_image(image.repository)
    digest = image.digest_for(platform) or (lab_digests(image).get(platform) if lab else None)
    if lab and not digest:
        raise RigError(where, "image.repository", f"the lab base {image.repository}:{image.tag} is not pinned on this machine",
                       f"run `make lab` and then `rig pin {recipe.name}` (writes .rig/lab/pins.yaml)")
    if not digest and not (allow_unpinned or os.environ.get(ALLOW_UNPINNED_ENV) == "1"):
        raise RigError(where, f"image.digests.{platform}", "the base image is unpinned",
                       f"run `rig pin {recipe.name}`, or build anyway with {ALLOW_UNPINNED_ENV}=1")
    from rig.docker_client import docker_client

    docker_client()  # one clear line when no engine answers, before anything is sent
    tag = f"{image_name(recipe)}:{image_tag}"
    command = ["docker", "build", "--platform", platform, "-f", str(dockerfile_path(recipe)), "-t", tag,
               "--build-arg", f"RIG_SOURCE_COMMIT={source_commit()}"]
    if digest:
        command += ["--build-arg", f"BASE_DIGEST={digest}"]
    if lab:  # the lab base installs torch from the lab's loopback wheelhouse (PIP_FIND_LINKS)
        command += ["--network", "host"]
    files, size = context_size()
    env = builder_env()
    print(f"build context: {files} files, {size / 1e6:.2f} MB (what .dockerignore lets through)")
    print(" ".join([*(f"{k}={v}" for k, v in env.items()), *command, "."]))
    started = time.monotonic()
    code = subprocess.run(command + ["."], cwd=REPO_ROOT, env={**os.environ, **env}, check=False).returncode
    print(f"{tag}: {'built' if code == 0 else 'FAILED'} in {time.monotonic() - started:.0f}s")
    return code
