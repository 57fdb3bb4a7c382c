"""rig's SGLang launch argv against SGLang's own argument parser, read from the pinned release's wheel
(tests/oracles/engine_args.py; the wheel is the one the drift check downloads, cached). Every recipe and
variant of engine sglang must parse under the release its drift check names; a misspelled flag, a
flag the release does not have and a bad value must each fail with one line."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from oracles.engine_args import launch_args, sglang_grammar

from rig.deploy.recipe import all_recipe_paths, parse_recipe
from rig.drift import engine_release, fetch_wheel
from rig.engines import ENGINES, Launch, server_argv
from rig.errors import RigError

# The newest SGLang whose pins fit the H200s (torch 2.11.0, Python 3.12): benchmarks/sglang-feasibility.md.
H200_RELEASE = "0.5.17"
PINNED_RELEASE = "0.5.23"  # mia-tp4's engine.check_release


def grammar(release: str):
    return sglang_grammar(fetch_wheel("sglang", release))


def sglang_boots() -> list[tuple[Path, str | None, int]]:
    """(recipe, variant, node rank) for every recipe of engine sglang, each variant, each node."""
    boots = []
    for path in all_recipe_paths():
        recipe = parse_recipe(path)
        if recipe.engine.name != "sglang":
            continue
        for variant in recipe.variants or [None]:
            boots += [(path, variant, rank) for rank in range(recipe.variant(variant).topology.nodes)]
    return boots


BOOTS = sglang_boots()


def test_there_are_sglang_recipes_to_check():
    assert any(path.stem == "mia-tp4" for path, _, _ in BOOTS), BOOTS


@pytest.mark.parametrize(("path", "variant", "rank"), BOOTS, ids=[f"{p.stem}:{v}:node{r}" for p, v, r in BOOTS])
def test_every_sglang_recipe_parses_under_its_release(path, variant, rank):
    recipe = parse_recipe(path)
    resolved = recipe.variant(variant)
    release, _ = engine_release(recipe)
    argv = server_argv(resolved, recipe.model.path, "0.0.0.0", node_rank=rank)
    parsed = grammar(release).check(launch_args(argv), f"recipes/{path.name} ({resolved.ref})")
    # The parser read the values rig meant, under the names SGLang gives them.
    assert parsed.model_path == recipe.model.path
    assert parsed.port == recipe.serving.port and parsed.tp_size == resolved.topology.tp
    if resolved.topology.nodes > 1:
        assert (parsed.nnodes, parsed.node_rank) == (resolved.topology.nodes, rank)
        assert parsed.dist_init_addr.startswith("${RIG_DIST_INIT_ADDR:?")


@pytest.mark.parametrize("release", [H200_RELEASE, PINNED_RELEASE])
def test_rigs_launch_flags_exist_in_both_releases(release):
    spec = ENGINES["sglang"]
    launch = Launch(model_path="/models/m", host="127.0.0.1", port="30000", tp=4, ep=2, dcp=1, nodes=2, node_rank=1)
    argv = [*spec.program.console, *spec.argv(launch), *spec.multinode(launch), "--served-model-name", "m", "--enable-metrics"]
    parsed = grammar(release).check(launch_args(argv), f"rig/engines.py (sglang {release})")
    assert (parsed.tp_size, parsed.ep_size, parsed.nnodes, parsed.node_rank) == (4, 2, 2, 1)
    assert parsed.enable_metrics is True and parsed.served_model_name == "m"


def mia_args(*edits: tuple[str, str]) -> list[str]:
    recipe = parse_recipe(next(p for p, _, _ in BOOTS if p.stem == "mia-tp4"))
    args = launch_args(server_argv(recipe.variant("host"), recipe.model.path, "127.0.0.1"))
    for old, new in edits:
        args = [new if arg == old else arg for arg in args]
    return [arg for arg in args if arg]


def rejection(release: str, args: list[str]) -> str:
    with pytest.raises(RigError) as caught:
        grammar(release).check(args, "recipes/mia-tp4.yaml (mia-tp4:host)")
    message = str(caught.value)
    assert message.startswith("recipes/mia-tp4.yaml (mia-tp4:host): server_args: ") and "\n" not in message
    return message


def test_misspelled_flags_fail_with_a_suggestion():
    message = rejection(PINNED_RELEASE, mia_args(("--enable-metrics", "--enable-metric")))
    assert "unrecognized arguments: --enable-metric" in message and "did you mean --enable-metrics?" in message
    message = rejection(PINNED_RELEASE, mia_args(("--fp8-gemm-backend", "--fp8-gemm-backends")))
    assert "--fp8-gemm-backends" in message
    # SGLang would take the unique prefix; rig refuses it, since the next release may make it ambiguous.
    assert "unrecognized arguments: --trust-remote" in rejection(PINNED_RELEASE, mia_args(("--trust-remote-code", "--trust-remote")))


def test_flags_a_release_does_not_have_fail():
    attn_dp = mia_args() + ["--attn-dp-size", "2"]  # added after 0.5.17
    grammar(PINNED_RELEASE).check(attn_dp, "new flag")
    assert "unrecognized arguments: --attn-dp-size 2" in rejection(H200_RELEASE, attn_dp)
    max_bs = mia_args() + ["--cuda-graph-max-bs", "8"]  # removed before 0.5.23
    grammar(H200_RELEASE).check(max_bs, "old flag")
    assert "unrecognized arguments: --cuda-graph-max-bs 8" in rejection(PINNED_RELEASE, max_bs)
    assert "--enable-expert-parallel" in rejection(PINNED_RELEASE, mia_args() + ["--enable-expert-parallel"])  # vLLM's spelling


def test_bad_values_fail():
    assert "invalid choice: 'flashinfer_cutlas'" in rejection(PINNED_RELEASE, mia_args(("flashinfer_cutlass", "flashinfer_cutlas")))
    assert "invalid int value: 'four'" in rejection(PINNED_RELEASE, mia_args(("4", "four")))
    assert "expected one argument" in rejection(PINNED_RELEASE, mia_args(("deepseek-v4.1-flash", "")))
    assert "unrecognized arguments: yes" in rejection(PINNED_RELEASE, mia_args() + ["--enable-metrics", "yes"])
    assert "required: --model-path" in rejection(PINNED_RELEASE, ["--port", "30000"])
    assert "help" in rejection(PINNED_RELEASE, mia_args() + ["--help"])


@pytest.mark.parametrize("release", [H200_RELEASE, PINNED_RELEASE])
def test_the_grammar_is_sglangs_own(release):
    actions = grammar(release).parser._option_string_actions
    # Derived by SGLang's add_cli_args_from_dataclass from the field annotations.
    assert actions["--trust-remote-code"].nargs == 0 and actions["--tp-size"].type is int
    assert actions["--tensor-parallel-size"] is actions["--tp-size"] and actions["--tp-size"].dest == "tp_size"
    assert actions["--fp8-gemm-backend"].dest == "fp8_gemm_runner_backend"  # Arg(cli_name=...) differs from the field
    assert "flashinfer_cutlass" in actions["--fp8-gemm-backend"].choices
    # SGLang's own argparse action classes, executed from the wheel.
    deprecated = {H200_RELEASE: "--stream-output", PINNED_RELEASE: "--enable-dp-attention"}[release]
    assert type(actions[deprecated]).__name__ == "DeprecatedStoreTrueAction"
    assert type(actions[deprecated]).__module__.endswith("sglang.srt.arg_groups.argparse_actions")
    # Only the choices SGLang computes from run-time registries go unchecked, and the grammar says so.
    assert grammar(release).unchecked == ("--kv-canary-real-data", "--reasoning-parser", "--tool-call-parser")


def test_launch_args_needs_the_sglang_launcher():
    assert launch_args(["python3", "-m", "sglang.launch_server", "--port", "1"]) == ["--port", "1"]
    with pytest.raises(RigError, match="no `-m sglang.launch_server`"):
        launch_args(["vllm", "serve", "/m"])


# ---- a release the reader cannot model fails loudly, naming the line ----------------------

def fake_release(tmp_path: Path, server_args: str) -> Path:
    """A wheel with the real release's arg_utils/argparse_actions and a hand-written server_args.py."""
    real = zipfile.ZipFile(fetch_wheel("sglang", PINNED_RELEASE))
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as fake:
        for name in ("sglang/srt/arg_groups/arg_utils.py", "sglang/srt/arg_groups/argparse_actions.py"):
            fake.writestr(name, real.read(name))
        fake.writestr("sglang/srt/server_args.py", server_args)
    return wheel


SERVER_ARGS = '''
import argparse, os
from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass
from sglang.srt.some_heavy_module import REGISTRY

BACKENDS = ["triton", "flashinfer"]

class ServerArgs:
    model_path: A[str, Arg(help="weights", aliases=["--model"])]
    port: A[int, "port"] = 30000
    tp_size: A[int, Arg(help="tp", cli_name="--tp-size", aliases=ALIASES)] = 1
    attention_backend: A[str, Arg(help="attn", choices=BACKENDS + ["torch_native"])] = "triton"
    parser_name: A[str, Arg(help="from a registry", choices=list(REGISTRY))] = None

    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        EXTRA
'''


def test_an_unreadable_definition_names_its_line(tmp_path):
    wheel = fake_release(tmp_path, SERVER_ARGS.replace("ALIASES", "REGISTRY.aliases").replace("EXTRA", "pass"))
    with pytest.raises(RigError, match=r"sglang/srt/server_args.py:11: cannot read the aliases REGISTRY.aliases"):
        sglang_grammar(wheel)


def test_a_conditional_flag_is_refused_not_guessed(tmp_path):
    extra = 'if os.environ.get("X"):\n            parser.add_argument("--x", action="store_true")'
    wheel = fake_release(tmp_path, SERVER_ARGS.replace("ALIASES", '["--tp"]').replace("EXTRA", extra))
    with pytest.raises(RigError, match=r"server_args.py:18: adds flags under a condition"):
        sglang_grammar(wheel)


def test_a_readable_fake_release_parses(tmp_path):
    wheel = fake_release(tmp_path, SERVER_ARGS.replace("ALIASES", '["--tp"]').replace("EXTRA", 'parser.add_argument("--x", nargs=2)'))
    fake = sglang_grammar(wheel)
    parsed = fake.check(["--model", "/m", "--tp", "2", "--attention-backend", "torch_native", "--x", "a", "b", "--parser-name", "any"], "fake")
    assert (parsed.model_path, parsed.tp_size, parsed.attention_backend, parsed.x) == ("/m", 2, "torch_native", ["a", "b"])
    assert fake.release == "9.9.9" and fake.unchecked == ("--parser-name",)
    assert "invalid choice: 'fa3'" in str(pytest.raises(RigError, fake.check, ["--model", "/m", "--attention-backend", "fa3"], "fake").value)


def test_the_native_driver_launch_through_a_named_interpreter_parses():
    """A native SGLang recipe starts `<interpreter> -m sglang.launch_server ...`: the same grammar holds."""
    recipe = parse_recipe(next(p for p, _, _ in BOOTS if p.stem == "mia-tp4"))
    argv = server_argv(recipe.variant("host"), recipe.model.path, "127.0.0.1", python="/opt/sglang-venv/bin/python")
    assert argv[:3] == ["/opt/sglang-venv/bin/python", "-m", "sglang.launch_server"]
    parsed = grammar(PINNED_RELEASE).check(launch_args(argv), "native mia-tp4:host")
    assert parsed.tp_size == 4 and parsed.model_path == recipe.model.path
