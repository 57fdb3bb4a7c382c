"""`rig pin <recipe>`: resolve the base tag to its per-platform digests and write them in.

Runs `docker manifest inspect --verbose` (a registry query through the Docker client; no
engine needed), so it works on any machine that reaches the registry. Nothing is guessed:
if the registry does not answer, the recipe stays unpinned.
"""

from __future__ import annotations

import json
import re
import subprocess

from rig.atomic import write_text_atomic
from rig.deploy.pins import is_lab_image, write_lab_digests
from rig.deploy.recipe import parse_recipe, recipe_path
from rig.errors import RigError

PLATFORMS = ("linux/amd64", "linux/arm64")


def resolve_digests(reference: str, insecure: bool = False) -> dict[str, str]:
    command = ["docker", "manifest", "inspect", "--verbose", *(["--insecure"] if insecure else []), reference]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    except subprocess.TimeoutExpired:
        raise RigError("registry", reference, "did not answer within 300 s", "check that the registry is reachable, then run `rig pin` again") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no answer"])[-1]
        fix = ("run `make lab` (it starts the lab registry and pushes the lab base)" if insecure else
               "run `rig pin` on a machine that reaches the registry (docker login if it is private)")
        raise RigError("registry", reference, f"could not resolve the tag ({last})", fix)
    entries = json.loads(result.stdout)
    entries = entries if isinstance(entries, list) else [entries]
    digests = {}
    for entry in entries:
        platform = entry.get("Descriptor", {}).get("platform", {})
        key = f"{platform.get('os')}/{platform.get('architecture')}"
        if key in PLATFORMS:
            digests[key] = entry["Descriptor"]["digest"]
    if not digests:
        raise RigError("registry", reference, "no linux/amd64 or linux/arm64 manifest in the answer", "check the tag")
    return digests


def write_digests(path, digests: dict[str, str]) -> None:
    """Rewrite the `digests:` block of the recipe's image section, keeping the file's comments."""
    text = path.read_text()
    block = "  digests:\n" + "".join(f"    {p}: {d}\n" for p, d in sorted(digests.items()))
    pattern = re.compile(r"^  digests:\n(?:    .*\n)*", re.MULTILINE)
    if pattern.search(text):
        text = pattern.sub(block, text, count=1)
    else:
        text = re.sub(r"^(  tag: .*\n)", lambda m: m.group(1) + block, text, count=1, flags=re.MULTILINE)
    text = re.sub(r"^  unpinned: true\n", "", text, flags=re.MULTILINE)
    write_text_atomic(path, text)


def pin(name: str) -> int:
    path = recipe_path(name)
    recipe = parse_recipe(path)
    image = recipe.container_image("pin")
    lab = is_lab_image(image.repository)
    digests = resolve_digests(f"{image.repository}:{image.tag}", insecure=lab)
    if lab:  # a lab image's digest is per machine: it never goes into a committed file
        where = write_lab_digests(image, digests)
        for platform, digest in sorted(digests.items()):
            print(f"{recipe.name}: {platform} {digest} (lab registry; written to {where})")
        return 0
    write_digests(path, digests)
    parse_recipe(path)
    for platform, digest in sorted(digests.items()):
        print(f"{recipe.name}: {platform} {digest}")
    print("now run `rig render` and commit the recipe and the rendered files")
    return 0
