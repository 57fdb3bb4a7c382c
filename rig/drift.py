"""The drift matrix: every adapter's hook targets verified statically against the engine
source a recipe pins (the release wheel from PyPI, no dependencies, cached), or inside a
built image against the engine installed there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from rig import paths
from rig.deploy.recipe import Recipe, all_recipe_paths, parse_recipe, recipe_path
from rig.engines import ENGINES
from rig.errors import RigError
from rig_adapters.registry import REGISTRY
from rig_adapters.targets import module_file_candidates, verdict


def fetch_wheel(distribution: str, version: str) -> Path:
    """The release's wheel, downloaded once into the cache: into a private directory first and then
    moved in, so a concurrent reader (parallel tests, two rig commands) never opens a partial file."""
    import shutil
    import tempfile

    target = paths.cache_dir() / "engines" / f"{distribution}-{version}"
    found = sorted(target.glob("*.whl"))
    if found:
        return found[0]
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=target))
    try:
        try:
            result = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                 f"{distribution}=={version}", "-d", str(staging)],
                capture_output=True, text=True, check=False, timeout=1800,  # engine wheels are hundreds of MB
            )
        except subprocess.TimeoutExpired:
            raise RigError("pip", f"{distribution}=={version}", "the download did not finish within 30 minutes",
                           "check that the package index is reachable, then run the check again") from None
        downloaded = sorted(staging.glob("*.whl"))
        if result.returncode != 0 or not downloaded:
            last = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise RigError("pip", f"{distribution}=={version}", f"could not download the wheel ({last})",
                           "check the version in the recipe's engine.check_release and that PyPI is reachable")
        for wheel in downloaded:
            os.replace(wheel, target / wheel.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(target.glob("*.whl"))[0]


class WheelSources:
    """Reads module sources out of wheels without installing or importing them."""

    def __init__(self, wheels: list[Path]) -> None:
        self.archives = [zipfile.ZipFile(path) for path in wheels]
        self.names = [set(archive.namelist()) for archive in self.archives]

    def read(self, module: str) -> str | None:
        for archive, names in zip(self.archives, self.names):
            for candidate in module_file_candidates(module):
                if candidate in names:
                    return archive.read(candidate).decode("utf-8")
        return None

    def pinned_requirement(self, distribution: str) -> str | None:
        """The exact version the engine's metadata pins for `distribution` (any extra)."""
        archive = self.archives[0]
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        for requirement in metadata.get_all("Requires-Dist") or []:
            match = re.match(rf"^{re.escape(distribution)}\s*(?:\[[^\]]*\])?\s*==\s*([\w.]+)", requirement, re.IGNORECASE)
            if match:
                return match.group(1)
        return None


def engine_release(recipe: Recipe) -> tuple[str, str]:
    """(release checked, note): a development build is checked against its named stand-in."""
    if recipe.engine.check_release:
        return recipe.engine.check_release, f"stand-in for {recipe.engine.version}"
    if re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", recipe.engine.version):
        return recipe.engine.version, "pinned release"
    raise RigError(f"recipes/{recipe.name}.yaml", "engine.check_release",
                   f"engine.version {recipe.engine.version!r} is not a release on PyPI",
                   "name the release the drift check should read in engine.check_release")


def matrix(recipe: Recipe) -> list[dict[str, str]]:
    release, note = engine_release(recipe)
    wheels = [fetch_wheel(ENGINES[recipe.engine.name].package, release)]
    sources = WheelSources(wheels)
    # Libraries the adapters depend on, at the version the engine pins: the one that would make an
    # adapter redundant, and the kernel libraries its route ends in (FlashInfer for b12x).
    libraries: list[str] = []
    for spec in REGISTRY:
        if recipe.engine.name in spec.engines:
            wanted = ([spec.redundant_if[0]] if spec.redundant_if else []) + [k.distribution for k in spec.kernels]
            libraries += [name for name in wanted if name not in libraries]
    for distribution in libraries:
        pinned = sources.pinned_requirement(distribution)
        if pinned:
            wheels.append(fetch_wheel(distribution, pinned))
    sources = WheelSources(wheels)
    enabled = {use.name for name in (recipe.variants or [None]) for use in recipe.variant(name).adapters}
    rows = []
    for spec in REGISTRY:
        if recipe.engine.name not in spec.engines:
            continue
        state, detail = verdict(spec, sources.read, recipe.engine.name)
        rows.append({"recipe": recipe.name, "engine": f"{recipe.engine.name} {release} ({note})", "adapter": spec.name,
                     "enabled": "yes" if spec.name in enabled else "no", "state": state, "detail": detail,
                     "checked": ", ".join(w.name for w in wheels)})
    return rows


def check_image(image: str) -> int:
    """Run the same verification inside a built image, against the engine installed there."""
    import docker
    from rig.docker_client import docker_client

    client = docker_client()
    try:
        labels = client.images.get(image).labels or {}
    except docker.errors.ImageNotFound:
        raise RigError(image, "--image", "no such image on this Docker engine", "build it with `make build <recipe>` (see `docker images`)") from None
    engine = labels.get("io.rig.engine", "").split(" ")[0]
    if not engine:
        raise RigError(image, "label io.rig.engine", "the image carries no rig engine label", "build it with `make build <recipe>`")
    # check-targets exits 1 when an adapter would refuse: keep its table either way.
    container = client.containers.run(image, ["-m", "rig_adapters", "check-targets", engine], entrypoint="python3", detach=True)
    try:
        code = container.wait(timeout=300).get("StatusCode", 1)
        text = container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    standin = f"; {labels['io.rig.standin']}" if labels.get("io.rig.standin") else ""
    print(f"{image} ({engine}, installed engine{standin}):\n{text}")
    if code not in (0, 1):
        raise RigError(image, "rig_adapters check-targets", f"exited {code} inside the image", "is rig_adapters installed in it? rebuild with `make build <recipe>`")
    return code  # check-targets' own verdict: 1 when an adapter would refuse, by its documented exit code


def run_check(recipes: list[str], image: str | None = None) -> int:
    if image:
        return check_image(image)
    paths = [recipe_path(r) for r in recipes] or all_recipe_paths()
    failures = 0
    print(f"{'recipe':11} {'adapter':13} {'enabled':7} verdict")
    for path in paths:
        recipe = parse_recipe(path)
        rows = matrix(recipe)
        if rows:
            print(f"# {recipe.name}: {rows[0]['engine']}; read from {rows[0]['checked']}")
        for row in rows:
            print(f"{row['recipe']:11} {row['adapter']:13} {row['enabled']:7} {row['state']}: {row['detail']}")
            if row["enabled"] == "yes" and row["state"] == "refuses":
                failures += 1
    if failures:
        print(f"{failures} enabled adapter(s) would refuse to arm", file=sys.stderr)
    return 1 if failures else 0
