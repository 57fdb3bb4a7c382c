"""The space a race searches: a strict YAML file whose candidates are recipe variants x
server-argument sets x environment sets, each resolved through the recipe and the engine's
argument grammar before anything boots.

    variants: [cb]                       # recipe variants (default: the recipe's default variant)
    server_args:                         # named sets of arguments appended to the variant's
      base: []
      big-batch: [--max-num-seqs, "256"]
    env:                                 # named environment sets (an arm's overlay: adapters' gates too)
      d0: {RIG_TOKEN_DELAY_MS: "0"}
      d1: {RIG_TOKEN_DELAY_MS: "1"}
    constraints:                         # optional: what the winner must also satisfy
      ttft_p99_ms: 500                   # a latency percentile the client measures, at most this
      greedy_identical: true             # greedy outputs identical to the baseline candidate's
      mean_abs_dlogprob: 0.05            # logprob drift from the baseline's boots (engines that score)
    goodput: {ttft: 500, tpot: 50}       # optional: race on goodput under these SLOs (ms; vLLM's ttft, tpot, e2el)

A candidate is named by the entries of the axes that vary, joined by "-" (d1-big-batch); an axis
with one entry adds nothing to the name. Each candidate is an arm of `rig compare` (variant and
environment overlay) plus its server arguments; it is refused in one line (file, field, fix) when
the recipe would refuse it as a variant.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from pydantic import Field, ValidationError

from rig import grammar
from rig.compare.arms import Arm, parse_arm
from rig.compare.design import MAX_ARMS
from rig.deploy.recipe import Resolved, check_semantics, load
from rig.deploy.recipe_model import Variant
from rig.errors import Invalid, RigError
from rig.load.figures import HEADLINE, LATENCY, NEEDS_TWO_TOKENS, USER_DECODE
from rig.load.scenarios import Scenario, load_scenario
from rig.paths import REPO_ROOT
from rig.strict_yaml import load_yaml_file
from rig.typed import Typed, first_problem, written_fix

SPACE_MAX_BYTES = 64 << 10
LATENCY_BOUNDS = {figure.name: figure for figure in LATENCY}


class Constraints(Typed):
    """What a candidate must satisfy besides its speed; `latency`: figure name -> its bound (ms)."""

    latency: dict[str, float] = Field(default_factory=dict)
    greedy_identical: bool = False
    mean_abs_dlogprob: float | None = None  # the most the candidate's logprobs may drift from the baseline's


class SpaceFile(Typed):
    """The file as written (see the module's docstring)."""

    variants: list[str] = Field(default_factory=list)
    server_args: dict[str, list[str]] = Field(default_factory=dict)
    env: dict[str, dict[str, str]] = Field(default_factory=dict)
    constraints: dict[str, float | bool] = Field(default_factory=dict)
    goodput: dict[str, float] | None = None  # SLOs in ms (ttft, tpot, e2el): race on goodput instead of the headline


class Candidate(Typed):
    """One configuration of the race: an arm (variant + environment) and its server arguments."""

    name: str
    variant: str | None = None
    server_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    def arm(self) -> Arm:
        """The candidate as a comparison arm (its server arguments ride on its recipe: `resolved`)."""
        pairs = [f"{key}={value}" for key, value in self.env.items()]
        overlay = ",".join(([f"@{self.variant}"] if self.variant else []) + pairs)
        if not overlay:  # the recipe as it is: an arm with nothing to overlay
            return Arm(name=self.name, spec=f"{self.name}:(recipe)")
        return parse_arm(f"{self.name}:{overlay}", environ={})

    def describe(self) -> str:
        parts = ([f"@{self.variant}"] if self.variant else []) + [f"{k}={v}" for k, v in self.env.items()]
        return " ".join(parts + self.server_args) or "the recipe as it is"


class Space(Typed):
    """The candidates, baseline first, and the constraints."""

    source: str
    candidates: list[Candidate]
    constraints: Constraints
    slos: dict[str, float] | None = None  # goodput SLOs in seconds (rig.tune.goodput): the objective when given

    @property
    def baseline(self) -> Candidate:
        return self.candidates[0]


def _with_server_args(resolved: Resolved, name: str, extra: list[str], where: str, args_name: str | None = None) -> Resolved:
    """`resolved` with `extra` appended to its server arguments, as a variant of its recipe named
    tune-NAME, checked by the recipe's own rules (owned flags, dummy weights, grammar). `args_name`:
    the space's name of the argument set `extra` (what an error names)."""
    recipe = resolved.recipe
    original = recipe.variants.get(resolved.variant) if resolved.variant else None
    fields = original.model_dump(exclude_unset=True) if original else {"description": "the recipe as it is"}
    fields["server_args"] = [*(original.server_args if original else []), *extra]
    synthetic = f"tune-{name}"
    try:
        variant = Variant.model_validate({**fields, "description": f"rig tune candidate {name}"})
        overlaid = recipe.model_copy(update={"variants": {**recipe.variants, synthetic: variant}})
        check_semantics(overlaid, where)
    except ValidationError as error:
        field, problem = first_problem(error)
        raise Invalid(where, f"candidate {name}: {field}", problem, "fix that server argument set") from None
    except RigError as error:
        field = error.field.removeprefix(f"variants.{synthetic}.")
        own = len(fields["server_args"]) - len(extra)  # the variant's own arguments come first
        if (index := field.removeprefix("server_args.")).isdigit() and int(index) >= own:
            field = f"server_args.{args_name or name}.{int(index) - own}"  # the space's own list, as the user wrote it
        raise Invalid(where, f"candidate {name}: {field}", error.problem, error.fix) from None
    return overlaid.variant(synthetic)


def resolve(recipe: str, candidate: Candidate, where: str = "space", args_name: str | None = None) -> tuple[Resolved, Resolved]:
    """(what the boot driver starts, the recipe as the candidate runs it): rig.compare.run's pair.
    `args_name`: the space's name of the candidate's server-argument set, where it is known."""
    arm = candidate.arm()
    try:
        base, resolved = arm.base(recipe), arm.resolve(recipe)
    except RigError as error:
        raise Invalid(where, f"candidate {candidate.name}", error.problem, error.fix) from None
    if candidate.server_args:
        base = _with_server_args(base, candidate.name, candidate.server_args, where, args_name)
        resolved = _with_server_args(resolved, candidate.name, candidate.server_args, where, args_name)
    return base, resolved


def _refuse(where: str, field: str, problem: str, fix: str) -> Invalid:
    return Invalid(where, field, problem, fix)


def _constraints(raw: dict[str, float | bool], where: str, scenario: Scenario, baseline: str | None,
                 engine: str) -> Constraints:
    """Each constraint the client can measure in this scenario, at the race's size, on this engine;
    any other is refused up front."""
    from rig.engines import ENGINES

    kind_tokens = scenario.max_tokens
    latency: dict[str, float] = {}
    greedy = False
    dlogprob = None
    for key, value in raw.items():
        field = f"constraints.{key}"
        if key == "mean_abs_dlogprob":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 100:
                raise _refuse(where, field, f"{value!r} is not a positive bound", "write mean_abs_dlogprob: 0.05")
            if ENGINES[engine].scoring is None:
                raise _refuse(where, field, f"{engine} returns no logprobs of a given sequence: the drift cannot be measured",
                              "bound greedy_identical instead, or race an engine that scores (vLLM, SGLang)")
            dlogprob = float(value)
            continue
        if key == "greedy_identical":
            if not isinstance(value, bool):
                raise _refuse(where, field, f"{value!r} is not true or false", "write greedy_identical: true")
            greedy = value
            continue
        if key not in LATENCY_BOUNDS:
            raise _refuse(where, field, "is not a constraint the client measures",
                          f"use greedy_identical, mean_abs_dlogprob or a latency bound in ms: {', '.join(LATENCY_BOUNDS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e7:
            raise _refuse(where, field, f"{value!r} is not a positive bound in ms", f"write {key}: 500")
        if key in NEEDS_TWO_TOKENS and kind_tokens < 2:
            raise _refuse(where, field, f"scenario {scenario.name} asks for one token per request: there is no inter-token time "
                          "to bound", "bound ttft_p50_ms or ttft_p99_ms, or race a scenario that decodes")
        latency[key] = float(value)
    for key in ("greedy_identical", "mean_abs_dlogprob") if baseline is None else ():
        if raw.get(key) not in (None, False):
            raise _refuse(where, f"constraints.{key}", "needs the candidate whose outputs are the reference",
                          "pass --baseline NAME (the configuration you run today)")
    return Constraints(latency=latency, greedy_identical=greedy, mean_abs_dlogprob=dlogprob)


def _check_headline(scenario: Scenario) -> None:
    """The scenario's headline must be a figure its requests can give at the race's size: per-user
    decode speed needs a second token."""
    headline = HEADLINE[scenario.kind].name
    if HEADLINE[scenario.kind] is USER_DECODE and scenario.max_tokens < 2:
        raise RigError("command line", "--scenario", f"{scenario.name} asks for {scenario.max_tokens} token per request: "
                       f"its headline {headline} (decode speed) has no decoded token to time",
                       "race a scenario that decodes, or race on goodput (--goodput ttft:500)")


def _axis(where: str, field: str, names: list[str]) -> None:
    for name in names:
        if not grammar.is_recipe_name(name):
            raise _refuse(where, f"{field}.{name[:40]}", f"{name[:40]!r} is not a name of lowercase letters, digits and -",
                          "rename the entry, e.g. big-batch")


def load_space(path: Path, recipe: str, scenario: str, baseline: str | None = None, small: bool = False,
               goodput: str | None = None) -> Space:
    """The space in `path` for `recipe`, every candidate resolved, every constraint and SLO checked
    against `scenario` at the race's size (`small`); `goodput` is --goodput's SLOs. One line per problem."""
    from rig.load.goodput import parse_slos
    from rig.tune.goodput import check_measurable, slos_from_mapping

    where = str(path)
    sized = load_scenario(scenario).scaled(small)
    shipped = REPO_ROOT / "recipes" / "spaces" / path.name
    missing = ("no such file", f"did you mean {shipped.relative_to(REPO_ROOT)}?" if shipped.is_file() and not path.exists()
               else "check the path (rig's own spaces are in recipes/spaces/)")
    raw = load_yaml_file(path, SPACE_MAX_BYTES, where, missing)
    if not isinstance(raw, dict):
        raise _refuse(where, "(top level)", "is not a mapping", "write variants:, server_args:, env: and constraints: keys")
    try:
        written = SpaceFile.model_validate(raw)
    except ValidationError as error:
        field, problem = first_problem(error)
        raise _refuse(where, field, problem, written_fix(error, SpaceFile) or "see `rig tune --help` for the space format") from None
    recipe_file = load(recipe).recipe
    for variant in written.variants:
        if variant not in recipe_file.variants:
            raise _refuse(where, f"variants.{variant[:40]}", f"{recipe} has no variant {variant[:40]!r}",
                          f"use one of {', '.join(sorted(recipe_file.variants)) or '(none)'}")
    _axis(where, "server_args", list(written.server_args))
    _axis(where, "env", list(written.env))
    variants: list[str | None] = list(written.variants) or [None]
    arg_sets = list(written.server_args.items()) or [("", [])]
    env_sets = list(written.env.items()) or [("", {})]
    candidates, args_of = [], {}
    for variant, (arg_name, args), (env_name, env) in itertools.product(variants, arg_sets, env_sets):
        parts = [p for p, axis in ((variant or "", variants), (arg_name, arg_sets), (env_name, env_sets)) if len(axis) > 1]
        name = "-".join(parts) or "only"
        if len(name) > grammar.NAME_MAX:
            raise _refuse(where, "(names)", f"candidate name {name[:40]}... is longer than {grammar.NAME_MAX} characters",
                          "shorten the names of the entries")
        candidates.append(Candidate(name=name, variant=variant, server_args=args, env=env))
        args_of[name] = arg_name
    if len(candidates) < 2:
        raise _refuse(where, "(top level)", f"{len(candidates)} candidate: a race needs two or more",
                      "give an axis (variants, server_args or env) a second entry")
    if len(candidates) > MAX_ARMS:
        raise _refuse(where, "(top level)", f"{len(candidates)} candidates; a race has at most {MAX_ARMS}",
                      "race fewer entries per axis (or race the best of each axis first)")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise _refuse(where, "(names)", "two candidates get the same name", "give the entries of each axis distinct names")
    if baseline is not None:
        if baseline not in names:
            raise RigError("command line", "--baseline", f"no candidate {baseline!r}", f"use one of {', '.join(names)}")
        candidates.sort(key=lambda c: c.name != baseline)  # the baseline first: its first boot is the quality reference
    for candidate in candidates:
        resolve(recipe, candidate, where, args_of[candidate.name])
    constraints = _constraints(written.constraints, where, sized, baseline, recipe_file.engine.name)
    if goodput is not None and written.goodput is not None:
        raise RigError("command line", "--goodput", f"{where} names its SLOs already (goodput:)",
                       "keep one: drop --goodput, or the space's goodput: key")
    if goodput is not None:
        slos = parse_slos(goodput) or {}
        check_measurable(slos, sized, "command line", "--goodput")
    elif written.goodput is not None:
        slos = slos_from_mapping(dict(written.goodput), where, "goodput")
        check_measurable(slos, sized, where, "goodput")
    else:
        slos = None
        _check_headline(sized)
    return Space(source=where, candidates=candidates, constraints=constraints, slos=slos)
