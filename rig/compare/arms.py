"""Arms: what differs between the sides of a comparison, resolved through the recipe, and the
boot order that cancels drift."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import Field, ValidationError, ValidationInfo, field_serializer, model_validator

from rig.deploy.recipe import Resolved, check_semantics, load, parse_recipe, recipe_path
from rig.deploy.recipe_model import AdapterUse, Variant
from rig.deploy.recipe_owned import check_overlay
from rig.env_names import secret_pair
from rig.errors import Invalid, RigError
from rig.grammar import IMAGE_TAG_VARIABLE
from rig.redaction import REDACTED
from rig.typed import STORED, Spec, first_problem


class Arm(Spec):
    """`NAME:K=V[,K=V]` (environment overlay), `NAME:@variant[,K=V..]` (recipe variant) or `NAME:image=TAG`;
    a `K` alone takes its value from rig's own environment (a secret then never reaches argv).

    A secret's value (a secret-looking name, HF_TOKEN=...; a value with credentials in it,
    HTTPS_PROXY=http://user:pw@proxy; any value taken from the environment) reaches the server and
    nothing else: `spec` holds it as REDACTED, or as its bare name (spec is what plans, boot entries,
    reports and progress lines show), and `env` is written out the same way, so a plan read back
    holds no secret; a resumed comparison takes the values again from its own command line and
    environment (run_compare)."""

    name: str
    variant: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    image_tag: str | None = None
    spec: str = ""
    inherited: list[str] = Field(default_factory=list)  # keys whose values came from rig's environment

    def secret(self, key: str) -> bool:
        return key in self.inherited or secret_pair(key, self.env.get(key, ""))

    @field_serializer("env")
    def _env_as_recorded(self, env: dict[str, str]) -> dict[str, str]:
        return {key: (REDACTED if self.secret(key) else value) for key, value in env.items()}

    @model_validator(mode="after")
    def _matches_its_spec(self, info: ValidationInfo) -> Arm:
        """An arm read back from a plan is parsed again from its spec, through the same grammar as
        the command line (a plan is a file on disk; its fields are not trusted on their own)."""
        if info.context == STORED:
            try:
                arm = parse_arm(self.spec, environ=None)
            except RigError as error:
                raise ValueError(error.problem) from None
            # As recorded: a plan written before secrets were redacted holds them in clear, and is
            # read (and shown) by the same redacted form; the values are never taken from it.
            if arm.model_dump() != {**self.model_dump(), "spec": recorded_spec(self.spec)}:
                raise ValueError(f"arm {recorded_spec(self.spec)!r} does not match its spec")
        return self

    def base(self, recipe_name: str) -> Resolved:
        """The recipe (variant) this arm boots; its rendered compose file is what compose runs."""
        return load(f"{recipe_name}:{self.variant}" if self.variant else recipe_name)

    def overlay(self) -> dict[str, str]:
        """What the boot driver adds to the server's environment (and compose's, for the image tag)."""
        return {**self.env, **({IMAGE_TAG_VARIABLE: self.image_tag} if self.image_tag else {})}

    def resolve(self, recipe_name: str, field: str | None = None) -> Resolved:
        """The recipe as this arm runs it: the overlay applied and validated like a variant. A gate in
        the overlay turns its adapter on or off (an adapter the recipe does not list is added, and
        must be allowed for the recipe); settings go to their adapter; the rest is server env.
        `field`: how refusals name the overlay (`rig up --env` resolves its overlay as an arm)."""
        from rig_adapters.registry import REGISTRY

        field = field or f"--arm {self.spec}"
        base = self.base(recipe_name)
        recipe = base.recipe
        check_overlay(base, self.overlay(), "command line", field)  # the image tag's grammar too
        if self.image_tag and recipe.driver == "native":
            raise RigError("command line", field, f"image={self.image_tag} selects a built image, and {recipe.name} boots natively "
                           "(driver: native), so it would change nothing: the same server runs without it",
                           "compare images with a compose recipe (driver: compose), or change the arm's variant or environment")
        gates = {spec.gate: spec for spec in REGISTRY}
        settings = {key: spec for spec in REGISTRY for key in spec.settings}
        adapters = {use.name: dict(use.gates) for use in base.adapters}
        env = {k: v for k, v in base.env.items()}
        for key, value in self.env.items():
            if key in gates:
                adapters.setdefault(gates[key].name, {})[key] = value
            elif key in settings:
                owner = settings[key].name
                if owner not in adapters and settings[key].gate not in self.env:
                    raise RigError("command line", field, f"{key} is a setting of {owner}, which this arm does not enable",
                                   f"add {settings[key].gate}=1 to the arm, or drop {key}")
                adapters.setdefault(owner, {})[key] = value
            elif not self.secret(key):  # a secret is pass-through environment, never part of what the arm records
                env[key] = value
        original = recipe.variants.get(base.variant) if base.variant else None
        synthetic = f"arm-{self.name}"
        try:
            variant = Variant(
                description=f"comparison arm {self.spec}",
                topology=base.topology,
                env={k: v for k, v in env.items() if k not in recipe.env or recipe.env[k] != v},
                server_args=list(original.server_args) if original else [],
                host_env=dict(original.host_env) if original else {},
                adapters=[AdapterUse(name=name, gates=gate_values) for name, gate_values in adapters.items()],
                boot_log=original.boot_log if original else None,
                audit=base.audit,
            )
            overlaid = recipe.model_copy(update={"variants": {**recipe.variants, synthetic: variant}})
        except ValidationError as error:
            # The rule a value broke, named by its key (env.KEY, adapters.0.gates.KEY) as the arm wrote it.
            where, rule = first_problem(error)
            key = next((str(part) for part in reversed(error.errors()[0]["loc"]) if isinstance(part, str)), where)
            raise Invalid("command line", f"{field} {key}", rule,
                          f"change {key}'s value in the arm to one the recipe's rules allow, or drop {key}") from None
        try:
            check_semantics(overlaid, field)
        except RigError as error:
            field_name = error.field.removeprefix(f"variants.{synthetic}.")
            raise RigError("command line", field, f"{field_name}: {error.problem}",
                           f"{error.fix} (or drop it from {field})") from None
        return overlaid.variant(synthetic)


def parse_arm(spec: str, environ: Mapping[str, str] | None = os.environ) -> Arm:
    """One line per malformed arm; names, keys, values and tags are checked against their grammar
    (an arm name becomes a directory name, keys and values reach a server's environment). A key
    alone takes its value from `environ`; None (an arm read back from a plan): REDACTED."""
    from rig import grammar

    def refuse(problem: str, fix: str = "write NAME:KEY=VALUE[,KEY=VALUE], NAME:@variant[,KEY=VALUE] or NAME:image=TAG") -> RigError:
        return RigError("command line", "--arm", f"{recorded_spec(spec)!r}: {problem}", fix)

    def empty_entry() -> RigError:
        return refuse("has an empty entry (two commas in a row, or one at the end)", "write one KEY=VALUE between commas")

    if grammar.control_character(spec):
        raise refuse("contains a control character", "pass a one-line arm")
    name, sep, rest = spec.partition(":")
    if not sep or not name or not rest:
        raise refuse("is not NAME:OVERLAY")
    if not grammar.is_recipe_name(name):
        raise refuse(f"arm name {name[:80]!r} must be at most {grammar.NAME_MAX} lowercase letters, digits and -",
                     "rename the arm, e.g. before, after")
    variant = None
    if rest.startswith("@"):
        variant, comma, rest = rest[1:].partition(",")
        if comma and not rest:
            raise empty_entry()
        if not grammar.RECIPE_NAME.fullmatch(variant):
            raise refuse(f"{variant!r} is not a variant name")
    if rest.startswith("image="):
        tag = rest.removeprefix("image=")
        try:
            grammar.tag(tag)
        except ValueError as error:
            raise refuse(str(error), f"name a tag built by `rig build` ({IMAGE_TAG_VARIABLE})") from None
        return Arm(name=name, variant=variant, image_tag=tag, spec=recorded_spec(spec))
    env: dict[str, str] = {}
    inherited: list[str] = []
    image_tag = None
    secret = None  # the secret key just read: what follows its value may be the rest of it
    for pair in rest.split(",") if rest else []:
        if not pair:
            raise empty_entry()
        key, eq, value = pair.partition("=")
        if not key or (not eq and (secret or not grammar.ENV_KEY.fullmatch(key))):
            raise refuse(f"the part after {secret}'s value is not KEY=VALUE (a comma inside a secret? write {secret} "
                         "alone and export it)" if secret else f"{pair!r} is not KEY=VALUE or an exported KEY")
        if not eq:  # KEY alone: its value from the environment, never written down
            if environ is not None and key not in environ:
                raise refuse(f"{key} takes its value from the environment, and it is not set there", f"export {key}=...")
            value = REDACTED if environ is None else environ[key]
            inherited.append(key)
        secret = key if eq and secret_pair(key, value) else None
        try:
            grammar.env_key(key)
        except ValueError as error:
            raise refuse(str(error)) from None
        if key in env or (key == IMAGE_TAG_VARIABLE and image_tag is not None):
            raise refuse(f"{key} is set twice", "set each key once")
        if key == IMAGE_TAG_VARIABLE:  # the image selector, spelled as a variable: the same grammar as image=
            try:
                image_tag = grammar.tag(value)
            except ValueError as error:
                raise refuse(str(error), f"name a tag built by `rig build` ({IMAGE_TAG_VARIABLE})") from None
            continue
        env[key] = value
    return Arm(name=name, variant=variant, env=env, image_tag=image_tag, spec=recorded_spec(spec), inherited=inherited)


def recorded_spec(spec: str) -> str:
    """The arm as rig writes and prints it: every secret KEY=VALUE's value REDACTED (a key alone
    names a value it takes from the environment, and shows none)."""
    name, sep, rest = spec.partition(":")
    if not sep:
        return spec
    pairs, secret = [], False
    for pair in rest.split(","):
        key, eq, value = pair.partition("=")
        if eq:
            secret = secret_pair(key, value)
            pairs.append(f"{key}={REDACTED}" if secret else pair)
        else:  # not KEY=VALUE: after a secret it may be the rest of its value (a comma inside it)
            pairs.append(REDACTED if secret else pair)
    return f"{name}:{','.join(pairs)}"


def check_arms(recipe_name: str, arms: list[Arm]) -> dict[str, Resolved]:
    """Every arm resolves (one line per bad overlay) before any boot starts."""
    parse_recipe(recipe_path(recipe_name))
    return {arm.name: arm.resolve(recipe_name) for arm in arms}


def boot_order(arms: list[Arm], boots: int) -> list[tuple[int, Arm]]:
    """(block, arm) in ABBA... order: block k runs every arm once, reversed on odd blocks, so a
    drift over time (thermal, page cache, autotune caches) falls on both sides equally."""
    order = []
    for block in range(boots):
        sequence = arms if block % 2 == 0 else list(reversed(arms))
        order += [(block, arm) for arm in sequence]
    return order
