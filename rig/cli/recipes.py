"""`rig validate`, `rig render`, `rig build` and `rig pin`: the recipe half of the command line."""

from __future__ import annotations

import argparse
import sys

from rig.cli_args import (
    Command,
    recipe_argument,
)
from rig.errors import RigError
from rig.exits import Exit


def cmd_validate(args: argparse.Namespace) -> int:
    from rig.deploy.recipe import all_recipe_paths, parse_recipe, recipe_path

    failed = 0
    for item in args.recipes or all_recipe_paths():
        try:  # a name that is not a recipe name is one more FAIL line, like a recipe that does not parse
            path = recipe_path(item) if isinstance(item, str) else item
            recipe = parse_recipe(path)
        except RigError as error:
            print(f"FAIL {error}")
            failed += 1
            continue
        note = " (UNPINNED: run `rig pin` before building)" if recipe.image is not None and recipe.image.unpinned else ""
        variants = f" variants: {', '.join(recipe.variants)}" if recipe.variants else ""
        print(f"ok   {path.relative_to(path.parent.parent) if path.parent.name == 'recipes' else path}{variants}{note}")
    return Exit.FAILED if failed else Exit.OK


def cmd_render(args: argparse.Namespace) -> int:
    from rig.deploy.recipe import all_recipe_paths, recipe_path
    from rig.deploy.render import render
    from rig.paths import REPO_ROOT

    paths = [recipe_path(item) for item in args.recipes] or all_recipe_paths()
    changed = render(paths, check=args.check)
    for path in changed:
        print(f"{'stale' if args.check else 'wrote'} {path.relative_to(REPO_ROOT)}")
    if args.check and changed:
        print("rendered files are stale: run `rig render` (or `make render`) and commit the result", file=sys.stderr)
        return Exit.FAILED
    if not changed:
        print("all rendered files are up to date")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from rig.deploy.build import build

    return build(args.recipe, allow_unpinned=args.allow_unpinned, platform=args.platform)


def cmd_pin(args: argparse.Namespace) -> int:
    from rig.deploy.pin import pin

    return pin(args.recipe)


def _recipes_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipes", nargs="*", help="recipe names or .yaml files (default: every recipe in recipes/)")


def _render_arguments(p: argparse.ArgumentParser) -> None:
    _recipes_arguments(p)
    p.add_argument("--check", action="store_true", help="fail if any rendered file is stale (what CI runs)")


def _build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="a recipe with an image (a compose recipe, e.g. tiny-cpu-docker)")
    p.add_argument("--allow-unpinned", action="store_true", help="build from a tag whose digest is not pinned")
    p.add_argument("--platform", help="linux/amd64 or linux/arm64 (default: the recipe's)")


COMMANDS = [
    Command("validate", cmd_validate, "validate recipes (all, or the named ones / files)",
            "Parse and check recipes with the strict loader: every field, every variant, every adapter gate. One line per "
            "recipe; a failure names the file, the field and the fix.",
            ("rig validate", "rig validate tiny-cpu mia-tp4"), _recipes_arguments),
    Command("render", cmd_render, "render docker/<recipe>/Dockerfile, compose/<recipe>.yaml and k8s/<recipe>.yaml",
            "Write each recipe's Dockerfile, compose file and Kubernetes manifests from the recipe (the single source of truth); --check only "
            "says which are stale.",
            ("rig render", "rig render --check"), _render_arguments),
    Command("build", cmd_build, "build a recipe's image (needs a Docker engine)",
            "Build the recipe's image on its digest-pinned engine base, with rig's runtime adapters baked in.",
            ("rig build tiny-cpu-docker",), _build_arguments),
    Command("pin", cmd_pin, "resolve a recipe's base tag to per-platform digests and write them",
            "Ask the registry for the digests of the recipe's base image tag, one per platform, and write them into the "
            "recipe, so that a build is reproducible.",
            ("rig pin tiny-cpu-docker",), recipe_argument),
]
