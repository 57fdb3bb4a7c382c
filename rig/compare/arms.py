"""Arms: what differs between the sides of a comparison, and the boot order that cancels drift."""

from __future__ import annotations

from dataclasses import dataclass, field

from rig.errors import RigError
from rig.recipe import Resolved, load


@dataclass(frozen=True)
class Arm:
    """`NAME:K=V[,K=V]` (environment overlay), `NAME:@variant[,K=V..]` (recipe variant) or `NAME:image=TAG`."""

    name: str
    variant: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    image_tag: str | None = None
    spec: str = ""

    def resolve(self, recipe_name: str) -> Resolved:
        return load(f"{recipe_name}:{self.variant}" if self.variant else recipe_name)

    def overlay(self) -> dict[str, str]:
        return {**self.env, **({"RIG_IMAGE_TAG": self.image_tag} if self.image_tag else {})}


def parse_arm(spec: str) -> Arm:
    name, sep, rest = spec.partition(":")
    if not sep or not name or not rest:
        raise RigError("command line", "--arm", f"{spec!r} is not NAME:OVERLAY",
                       "write NAME:KEY=VALUE[,KEY=VALUE], NAME:@variant[,KEY=VALUE] or NAME:image=TAG")
    variant = None
    if rest.startswith("@"):
        variant, _, rest = rest[1:].partition(",")
    if rest.startswith("image="):
        return Arm(name, image_tag=rest.removeprefix("image="), spec=spec)
    env = {}
    for pair in filter(None, rest.split(",")):
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise RigError("command line", "--arm", f"{pair!r} in {spec!r} is not KEY=VALUE", "write NAME:KEY=VALUE[,KEY=VALUE]")
        env[key] = value
    return Arm(name, variant=variant, env=env, spec=spec)


def boot_order(arms: list[Arm], boots: int) -> list[tuple[int, Arm]]:
    """(block, arm) in ABBA... order: block k runs every arm once, reversed on odd blocks, so a
    drift over time (thermal, page cache, autotune caches) falls on both sides equally."""
    order = []
    for block in range(boots):
        sequence = arms if block % 2 == 0 else list(reversed(arms))
        order += [(block, arm) for arm in sequence]
    return order
