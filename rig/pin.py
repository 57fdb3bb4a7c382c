"""`rig pin <recipe>`: resolve the base tag to its per-platform digests and write them in.

Runs `docker manifest inspect --verbose` (a registry query through the Docker client; no
engine needed), so it works on any machine that reaches the registry. Nothing is guessed:
if the registry does not answer, the recipe stays unpinned.
"""

from __future__ import annotations

import json
import re
import subprocess

from rig.errors import RigError
from rig.recipe import parse_recipe, recipe_path

PLATFORMS = ("linux/amd64", "linux/arm64")


def resolve_digests(reference: str) -> dict[str, str]:
    result = subprocess.run(["docker", "manifest", "inspect", "--verbose", reference],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no answer"])[-1]
        raise RigError("registry", reference, f"could not resolve the tag ({last})",
                       "run `rig pin` on a machine that reaches the registry (docker login if it is private)")
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
    path.write_text(text)


def pin(name: str) -> int:
    path = recipe_path(name)
    recipe = parse_recipe(path)
    digests = resolve_digests(f"{recipe.image.repository}:{recipe.image.tag}")
    write_digests(path, digests)
    parse_recipe(path)
    for platform, digest in sorted(digests.items()):
        print(f"{recipe.name}: {platform} {digest}")
    print("now run `rig render` and commit the recipe and the rendered files")
    return 0
