"""`make rehearse <gpu recipe>` (python -m rig.boot.rehearse rehearse <recipe>): the dress
rehearsal of a GPU recipe's image on the container lab. Its Dockerfile, unchanged, is built on the
STAND-IN base the lab serves (lab/lab.sh), and the adapters' targets are imported inside the
image with the recipe's gates: ARMED lines and manifests must come back."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from rig.boot.checks import check_log, read_manifests
from rig.deploy.build import builder_env, source_commit
from rig.deploy.pin import resolve_digests
from rig.deploy.pins import standin_reference
from rig.deploy.recipe import load
from rig.deploy.render import dockerfile_path, image_name
from rig.docker_client import docker_client
from rig.errors import RigError
from rig.paths import REPO_ROOT
from rig_adapters.registry import BY_NAME


def rehearse(ref: str) -> int:
    """Build docker/<recipe>/Dockerfile unchanged on the STAND-IN base, then import the adapters'
    targets inside the image with the recipe's gates: ARMED lines and manifests must come back."""
    resolved = load(ref)
    recipe = resolved.recipe
    if not recipe.gpu:
        raise RigError(f"recipes/{recipe.name}.yaml", "engine.name", "a rehearsal stands in for a GPU engine image",
                       f"build it for real: `make build {recipe.name}`")
    image = recipe.container_image("rehearse")
    client = docker_client()
    standin = standin_reference(image.repository)
    digest = resolve_digests(standin, insecure=True).get("linux/amd64")
    if not digest:
        raise RigError("lab registry", standin, "no linux/amd64 stand-in", "run `make lab`")
    tag = f"{image_name(recipe)}:standin"
    note = f"STAND-IN base {image.repository}@{digest} = {standin} (lab base + tests/standins, not the real engine)"
    print(f"{recipe.name}: rehearsal on a {note}")
    command = ["docker", "build", "-q", "--platform", "linux/amd64", "-f", str(dockerfile_path(recipe)), "-t", tag,
               "--build-arg", f"BASE_DIGEST={digest}", "--build-arg", f"RIG_SOURCE_COMMIT={source_commit()}",
               "--label", f"io.rig.standin={note}", "."]
    built = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **builder_env()}, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        print(built.stdout + built.stderr, file=sys.stderr)
        print(f"{recipe.name}: STAND-IN build of docker/{recipe.name}/Dockerfile FAILED", file=sys.stderr)
        return 1
    labels = client.images.get(tag).labels or {}
    problems = []
    if labels.get("org.opencontainers.image.base.digest") != digest:
        problems.append(f"label org.opencontainers.image.base.digest is {labels.get('org.opencontainers.image.base.digest')!r}, not {digest}")
    if labels.get("io.rig.recipe") != recipe.name:
        problems.append(f"label io.rig.recipe is {labels.get('io.rig.recipe')!r}")
    modules = sorted({target.module for use in resolved.adapters for target in BY_NAME[use.name].targets})
    with tempfile.TemporaryDirectory(prefix="rig-rehearsal-") as manifests:
        os.chmod(manifests, 0o777)  # noqa: S103 - the container's user writes its manifests here
        output = client.containers.run(
            tag, ["-c", "; ".join(f"import {m}" for m in modules)], entrypoint="python3", environment=resolved.full_env(),
            volumes={manifests: {"bind": "/rig/manifests", "mode": "rw"}}, remove=True, stdout=True, stderr=True,
        ).decode(errors="replace")
        states = {name: entry.get("state") for m in read_manifests(manifests) for name, entry in m.get("adapters", {}).items()}
    missing, forbidden = check_log(output, resolved.boot_log)
    problems += [f"boot_log.must {p!r} not in the container's output" for p in missing]
    problems += [f"boot_log.forbid matched: {line}" for line in forbidden]
    problems += [f"manifest: {use.name} is {states.get(use.name)!r}, not armed" for use in resolved.adapters
                 if states.get(use.name) != "armed"]
    print(f"{recipe.name}: {tag} built from docker/{recipe.name}/Dockerfile (unchanged); imported {', '.join(modules)} "
          f"with gates {', '.join(sorted(resolved.adapter_env()))}")
    for line in output.splitlines():
        if " ARMED" in line or "REFUSED" in line:
            print(f"  {line.strip()}")
    print(f"  manifests: {', '.join(f'{k}={v}' for k, v in sorted(states.items())) or 'none'}")
    for problem in problems:
        print(f"{recipe.name}: STAND-IN rehearsal: {problem}", file=sys.stderr)
    print(f"{recipe.name}: STAND-IN rehearsal {'FAILED' if problems else 'ok'}")
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "rehearse":
        print("usage: python -m rig.boot.rehearse rehearse <gpu-recipe>", file=sys.stderr)
        return 2
    try:
        return rehearse(argv[1])
    except RigError as error:
        print(error, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
