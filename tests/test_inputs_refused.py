"""Hostile inputs beyond the recipe schema (flags, environment, overlays, plans, files, state, the
command line, checkpoints): every class with crafted inputs, each refused in one line naming file
and field, and nothing written anywhere."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from conftest import REPO, rig_cli, rig_main, set_field

from rig import grammar
from rig.deploy.recipe import parse_recipe
from rig.env_names import secret_looking
from rig.errors import RigError

# What rig's validate and render could write: the rendered files, results, the up-state, recipes.
# Not .rig/lab (the container lab's registry storage, caches and logs, gigabytes that the lab and
# the prebuild beside the unit tests write) nor the harness's own logs in .rig/.
WATCHED = [REPO / "docker", REPO / "compose", REPO / "results", REPO / ".rig" / "state", REPO / "recipes"]


def tree(*roots: Path) -> dict[str, str | None]:
    """Every entry under `roots` as a snapshot to compare: a regular file by its size and sha256
    (read in chunks, never whole), a link by its target, a directory as None, anything else (a
    planted FIFO or device node) by its kind, never opened."""
    import hashlib
    import stat

    found: dict[str, str | None] = {}
    for root in roots:
        if not root.exists():
            continue
        for path in sorted(root.rglob("*")):
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):  # a planted link to /dev/zero is recorded, never read
                found[str(path)] = "-> " + os.readlink(path)
            elif stat.S_ISDIR(mode):
                found[str(path)] = None
            elif stat.S_ISREG(mode):
                with path.open("rb") as handle:
                    found[str(path)] = f"{path.stat().st_size} {hashlib.file_digest(handle, 'sha256').hexdigest()}"
            else:
                found[str(path)] = f"kind {stat.S_IFMT(mode):o}"
    return found


def write_recipe(folder: Path, base: str, change=None, name: str | None = None, text: str | None = None) -> Path:
    """A copy of recipes/<base>.yaml in `folder`, changed by `change(data)` or given as raw `text`."""
    folder.mkdir(parents=True, exist_ok=True)
    if text is None:
        data = yaml.safe_load((REPO / "recipes" / f"{base}.yaml").read_text())
        if change:
            change(data)
        text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
        name = name or data["name"]
    path = folder / f"{name or base}.yaml"
    path.write_text(text)
    return path


put = set_field


def line_of(base: str, needle: str, below: int = 0) -> str:
    """`line N` of the first line of recipes/<base>.yaml holding `needle` (plus `below`)."""
    lines = (REPO / "recipes" / f"{base}.yaml").read_text().splitlines()
    return f"line {next(i for i, line in enumerate(lines) if needle in line) + 1 + below}"


def raw(base: str, old: str, new: str) -> str:
    text = (REPO / "recipes" / f"{base}.yaml").read_text()
    assert old in text, old
    return text.replace(old, new, 1)


# case -> (base, change or raw text, field the message names, words the message holds)
CRAFTED = {
    # compose interpolation: every `$` refused, and no recipe value names the key
    "arg interpolates the key": ("tiny-cpu", put("server_args", ["--dtype", "${RIG_API_KEY}"]), "server_args.1", "'$'"),
    "env value interpolates": ("tiny-cpu", put("env", {"OMP_NUM_THREADS": "$RIG_API_KEY"}), "env.OMP_NUM_THREADS", "'$'"),
    "env default interpolates": ("tiny-cpu", put("env", {"OMP_NUM_THREADS": "${HOME:-1}"}), "env.OMP_NUM_THREADS", "'$'"),
    "escaped dollar": ("mia-tp4", put("env", {"NCCL_DEBUG": "$$INFO"}), "env.NCCL_DEBUG", "'$'"),
    "gate value interpolates": ("tiny-cpu", put("variants.delay.adapters", [{"name": "token_delay", "gates": {"RIG_TOKEN_DELAY_MS": "${X}"}}]),
                                "variants.delay.adapters.0.gates.RIG_TOKEN_DELAY_MS", "'$'"),
    "gate value never arms": ("tiny-cpu", put("variants.delay.adapters", [{"name": "token_delay", "gates": {"RIG_TOKEN_DELAY_MS": "abc"}}]),
                              "variants.delay.adapters.token_delay.gates.RIG_TOKEN_DELAY_MS", "is not a number"),
    "variant arg names the key": ("tiny-cpu", put("variants.cb.server_args", ["--chat-template", "rig_api_key"]),
                                  "variants.cb.server_args.1", "RIG_API_KEY"),
    "bind scope id interpolates": ("tiny-cpu", put("serving.bind", "fe80::1%${RIG_API_KEY}"), "serving.bind", "scope id"),
    "bind scope id": ("tiny-cpu", put("serving.bind", "fe80::1%eth0"), "serving.bind", "scope id"),
    "served name interpolates": ("mia-tp4", put("serving.served_model_name", "${RIG_API_KEY}"), "serving.served_model_name", "model id"),
    "host_env default interpolates": ("mia-tp4", put("variants.spark.host_env", {"NCCL_IB_HCA": "${RIG_API_KEY}"}),
                                      "variants.spark.host_env.NCCL_IB_HCA", "plain default"),
    "host_env names the key": ("mia-tp4", put("host_env", {"RIG_API_KEY": "x"}), "host_env.RIG_API_KEY", "set by rig"),
    # flags rig owns, in every spelling argparse accepts
    "host separate": ("tiny-cpu", put("server_args", ["--host", "0.0.0.0"]), "server_args.0", "--host"),
    "port with =": ("tiny-cpu", put("server_args", ["--port=9"]), "server_args.0", "--port"),
    "port abbreviated": ("tiny-cpu", put("variants.serial.server_args", ["--po", "9"]), "variants.serial.server_args.0", "--port"),
    "api key with =": ("mia-tp4", put("server_args", ["--api-key=abc"]), "server_args.0", "--api-key"),
    "api key separate, underscore": ("glm52-tp6", put("server_args", ["--api_key", "abc"]), "server_args.0", "--api-key"),
    "config abbreviated": ("mia-tp4", put("server_args", ["--conf", "/x.yaml"]), "server_args.0", "--config"),
    "vllm short tp": ("glm52-tp6", put("variants.a8.server_args", ["-tp", "8"]), "variants.a8.server_args.0", "-tp"),
    "vllm short tp abbreviated": ("glm52-tp6", put("server_args", ["-t", "8"]), "server_args.0", "-tp"),
    "vllm nested api key": ("glm52-tp6", put("server_args", ["--api-key.x=1"]), "server_args.0", "--api-key"),
    "served name as a flag": ("glm52-tp6", put("server_args", ["--served-model-name", "x"]), "server_args.0", "serving.served_model_name"),
    "sglang tp prefix": ("mia-tp4", put("server_args", ["--tp", "8"]), "server_args.0", "--tp-size"),
    "end of options": ("mia-tp4", put("server_args", ["--"]), "server_args.0", "ends option parsing"),
    # environment: loader and interpreter hooks, rig's own names, secrets
    "LD_PRELOAD": ("tiny-cpu", put("env", {"LD_PRELOAD": "/tmp/x.so"}), "env.LD_PRELOAD", "dynamic loader"),
    "LD_LIBRARY_PATH": ("mia-tp4", put("variants.spark.env", {"LD_LIBRARY_PATH": "/tmp"}), "variants.spark.env.LD_LIBRARY_PATH", "dynamic loader"),
    "PYTHONPATH": ("tiny-cpu", put("env", {"PYTHONPATH": "/tmp"}), "env.PYTHONPATH", "Python"),
    "PYTHONSTARTUP": ("tiny-cpu", put("variants.cb.env", {"PYTHONSTARTUP": "/tmp/x.py"}), "variants.cb.env.PYTHONSTARTUP", "Python"),
    "PYTHONHOME": ("glm52-tp6", put("env", {"PYTHONHOME": "/tmp"}), "env.PYTHONHOME", "Python"),
    "NCCL plugin": ("mia-tp4", put("env", {"NCCL_NET_PLUGIN": "/tmp/x.so"}), "env.NCCL_NET_PLUGIN", "plugin"),
    "NCCL topo file": ("mia-tp4", put("env", {"NCCL_TOPO_FILE": "/tmp/t.xml"}), "env.NCCL_TOPO_FILE", "file"),
    "PATH": ("tiny-cpu", put("env", {"PATH": "/tmp"}), "env.PATH", "python3"),
    "CUDA injection": ("glm52-tp6", put("env", {"CUDA_INJECTION64_PATH": "/tmp/x.so"}), "env.CUDA_INJECTION64_PATH", "CUDA"),
    "vLLM key variable": ("glm52-tp6", put("env", {"VLLM_API_KEY": "x"}), "env.VLLM_API_KEY", "set by rig"),
    "rig boot id": ("tiny-cpu", put("env", {"RIG_BOOT_ID": "x"}), "env.RIG_BOOT_ID", "set by rig"),
    "misspelled gate": ("tiny-cpu", put("env", {"RIG_TOKEN_DELAY": "5"}), "env.RIG_TOKEN_DELAY", "did you mean RIG_TOKEN_DELAY_MS (token_delay's gate)?"),
    "adapter namespace, nothing reads it": ("mia-tp4", put("variants.spark.env", {"DSV41_SHARED_PAD": "1"}),
                                            "variants.spark.env.DSV41_SHARED_PAD", "no adapter reads"),
    "declared token": ("tiny-cpu", put("env", {"HF_TOKEN": ""}), "env.HF_TOKEN", "looks like a secret"),
    "declared api key": ("glm52-tp6", put("variants.a8.env", {"OPENAI_API_KEY": "x"}), "variants.a8.env.OPENAI_API_KEY", "secret"),
    # boot-log regexes: RE2 only, bounded program, no global flags, no invisible characters
    "global inline flag": ("tiny-cpu", put("boot_log", {"forbid": ["(?i)refused"]}), "boot_log.forbid.0", "(?i:"),
    "global flag mid-pattern": ("tiny-cpu", put("boot_log", {"must": ["ready(?s).x"]}), "boot_log.must.0", "(?s)"),
    "stacked bounded repeats": ("tiny-cpu", put("boot_log", {"forbid": [".{0,999}.{0,999}x"]}), "boot_log.forbid.0", "RE2 instructions"),
    "large bounded repeat": ("tiny-cpu", put("boot_log", {"must": ["(ab|cd){0,999}"]}), "boot_log.must.0", "2000"),
    "zero-width space in pattern": ("tiny-cpu", put("boot_log", {"forbid": ["REF\u200bUSED"]}), "boot_log.forbid.0", "\\u200b"),
    "bidi mark in description": ("tiny-cpu", put("description", "tiny \u2066cpu"), "description", "\\u2066"),
    "zero-width joiner in a key": ("tiny-cpu", put("env", {"OMP\u200d_X": "1"}), "env", "\\u200d"),
    # fan-out and size
    "too many nodes": ("mia-tp4", put("variants.spark.topology", {"tp": 65, "nodes": 65, "gpus_per_node": 1}),
                       "variants.spark.topology.nodes", "64"),
    "huge tp": ("glm52-tp6", put("topology.tp", 10**9), "topology.tp", "4096"),
    "too many variants": ("tiny-cpu", lambda d: d["variants"].update({f"v{i}": {"description": "x"} for i in range(40)}),
                          "variants", "32"),
    "long variant name": ("tiny-cpu", lambda d: d["variants"].update({"v" * 200: {"description": "x"}}), "variants", "63"),
    "too many args": ("tiny-cpu", put("server_args", ["--device", "cpu"] * 200), "server_args", "256"),
    "too many gpu ids": ("mia-tp4", put("topology.gpu_ids", list(range(100))), "topology.gpu_ids", "64"),
    "huge value": ("tiny-cpu", put("description", "x" * 20_000), "line 2", "16384"),
    # YAML 1.1 surprises in typed fields
    "octal port": ("tiny-cpu", raw("tiny-cpu", "port: 8321", "port: 017620"), line_of("tiny-cpu", "port: 8321"), "8080"),
    # a required field misspelled: the misspelling is named, not the field as missing
    "misspelled section": ("tiny-cpu", raw("tiny-cpu", "\nserving:", "\nservng:"), "servng", "rename servng to serving"),
    "misspelled port": ("tiny-cpu", raw("tiny-cpu", "  port: 8321", "  prot: 8321"), "serving.prot", "rename prot to port"),
    "on as a name": ("mia-tp4", raw("mia-tp4", "served_model_name: deepseek-v4.1-flash", "served_model_name: on"),
                     line_of("mia-tp4", "served_model_name"), "YAML 1.2"),
    "sexagesimal timeout": ("tiny-cpu", raw("tiny-cpu", "boot_timeout_s: 180", "boot_timeout_s: 3:00"),
                            line_of("tiny-cpu", "boot_timeout_s"), "180"),
    "no as an env value": ("tiny-cpu", raw("tiny-cpu", 'TOKENIZERS_PARALLELISM: "false"', "TOKENIZERS_PARALLELISM: no"),
                           line_of("tiny-cpu", "TOKENIZERS_PARALLELISM"), "YAML 1.1"),
    "merge key": ("tiny-cpu", raw("tiny-cpu", "serving:\n", "serving:\n  <<: {port: 1}\n"), line_of("tiny-cpu", "serving:", 1), "merge keys"),
    "tag": ("tiny-cpu", raw("tiny-cpu", "port: 8321", "port: !!int 8321"), line_of("tiny-cpu", "port: 8321"), "tags"),
    "date description": ("tiny-cpu", raw("tiny-cpu", "description: transformers serve", "description: 2024-01-01\nx: transformers serve"),
                         line_of("tiny-cpu", "description:"), "date"),
    # names
    "long recipe name": ("tiny-cpu", put("name", "n" * 64), "name", "63"),
}


def _path(tmp_path: Path, case: str) -> Path:
    base, change, _, _ = CRAFTED[case]
    folder = tmp_path / case.replace(" ", "-").replace(":", "")
    if isinstance(change, str):
        return write_recipe(folder, base, text=change)
    return write_recipe(folder, base, change)


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_input_is_one_line_naming_the_field(tmp_path, case):
    _, _, field, words = CRAFTED[case]
    path = _path(tmp_path, case)
    with pytest.raises(RigError) as caught:
        parse_recipe(path)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message, message
    assert message.startswith(f"{path}: {field}"), message
    assert words in message and "fix: " in message and not message.endswith("fix: "), message


def test_validate_and_render_write_nothing_for_any_crafted_input(tmp_path, capsys):
    from rig.cli import main

    before = tree(*WATCHED)
    paths = [_path(tmp_path, case) for case in CRAFTED]
    listing = tree(tmp_path)
    for path in paths:
        assert main(["validate", str(path)]) == 1
        assert main(["render", str(path)]) == 2
        out, err = capsys.readouterr()
        assert out.startswith("FAIL ") and len(out.strip().splitlines()) == 1, out
        assert err.startswith("rig: ") and len(err.strip().splitlines()) == 1, err
    assert tree(*WATCHED) == before and tree(tmp_path) == listing


# ---- flags and environment: what is allowed, and the registry's say ---------------------------


def test_flags_rig_does_not_own_pass():
    owned = ("--host", "--port", "--api-key", "--config", "--served-model-name", "-tp")
    for token in ("--dtype", "bfloat16", "--config-format", "--port-range", "-O3", "-1", "--max-model-len=4096",
                  "--enable-prefix-caching", '{"linear":{"weight":"mxfp8"}}', "--hostname-x", "-x"):
        assert grammar.owned_flag(token, owned) is None, token
    assert grammar.owned_flag("--serv", owned) == "--served-model-name"
    assert grammar.owned_flag("--Host", owned) is None  # argparse matches case-sensitively


def test_a_flag_is_read_in_every_spelling_the_engines_accept():
    """grammar.flag_value: where a recipe points the engine's tokenizer (the last one given wins, as in argparse)."""
    flags = ("--tokenizer-path",)
    assert grammar.flag_value(["--dtype", "bfloat16"], flags) is None
    assert grammar.flag_value(["--tokenizer-path", "/a"], flags) == "/a"
    assert grammar.flag_value(["--tokenizer-path=/a"], flags) == "/a"
    assert grammar.flag_value(["--tokenizer_path", "/a", "--tokenizer-path=/b"], flags) == "/b"
    assert grammar.flag_value(["--tokenizer-p", "/a"], flags) == "/a"  # an abbreviation argparse expands
    assert grammar.flag_value(["--tokenizer-mode", "slow"], ("--tokenizer",)) is None  # another flag it prefixes
    assert grammar.flag_value(["--", "--tokenizer-path", "/a"], flags) is None  # after the end of options
    assert grammar.flag_value(["--tokenizer-path"], flags) is None  # no value: the engine's parser refuses it


def test_the_served_tokenizer_is_read_where_the_recipe_serves_it(tmp_path):
    """A recipe that serves another tokenizer (SGLang's --tokenizer-path, vLLM's --tokenizer) has it read
    there, for prompt sizes and the scoring check, where this host can: natively, a directory."""
    from rig.deploy.recipe import load
    from rig.loadrun.session import model_dir_for

    sglang = load("llama8b-sglang-h200")
    generated = model_dir_for(sglang)
    sglang.server_args = [*sglang.server_args, "--tokenizer-path", str(tmp_path)]
    assert model_dir_for(sglang) == str(tmp_path) != generated
    sglang.server_args[-1] = str(tmp_path / "absent")  # or a hub id: nothing this host can read
    assert model_dir_for(sglang) is None
    vllm = load("llama8b-h200")
    vllm.server_args = [*vllm.server_args, f"--tokenizer={tmp_path}"]
    assert model_dir_for(vllm) == str(tmp_path)
    sglang.server_args[-1] = "loadtests"  # relative: to the native server's working directory, the repository
    assert model_dir_for(sglang) == str(REPO / "loadtests")
    sglang.server_args[-1] = ""  # --tokenizer-path '': nothing to read
    assert model_dir_for(sglang) is None
    compose = load("mia-tp4")  # a container's path is not this host's
    compose.server_args = [*compose.server_args, "--tokenizer-path", str(tmp_path)]
    assert model_dir_for(compose) is None


def test_the_registry_can_allow_a_hook_variable(tmp_path, monkeypatch):
    import dataclasses

    import rig.engines as engines

    path = write_recipe(tmp_path, "mia-tp4", put("env", {"NCCL_TOPO_FILE": "/opt/topo.xml"}))
    with pytest.raises(RigError, match="NCCL_TOPO_FILE is a loader/interpreter hook"):
        parse_recipe(path)
    allowing = dataclasses.replace(engines.ENGINES["sglang"], allowed_env=("NCCL_TOPO_*",))
    monkeypatch.setitem(engines.ENGINES, "sglang", allowing)
    assert parse_recipe(path).env["NCCL_TOPO_FILE"] == "/opt/topo.xml"


def test_harmless_interpreter_settings_pass(tmp_path):
    path = write_recipe(tmp_path, "tiny-cpu", put("env", {"PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}))
    assert parse_recipe(path).env["PYTHONHASHSEED"] == "0"


def test_secret_looking_names_stay_redacted_whatever_the_recipe_says():
    from rig.deploy.recipe import load
    from rig.redaction import REDACTED, recordable_keys, redact_for

    resolved = load("tiny-cpu")
    smuggled = resolved.recipe.model_copy(update={"env": {**resolved.recipe.env, "HF_TOKEN": "", "WANDB_API_KEY": ""}})
    sneaky = smuggled.variant(None)
    assert "HF_TOKEN" in sneaky.full_env()  # declared (validation would refuse it; this one skipped validation)
    allowed = recordable_keys(sneaky)
    assert "HF_TOKEN" not in allowed and "WANDB_API_KEY" not in allowed and "OMP_NUM_THREADS" in allowed
    overlay = {"HF_TOKEN": "hf_planted", "WANDB_API_KEY": "wb_planted", "RIG_TOKEN_DELAY_MS": "5"}
    assert redact_for(sneaky, overlay) == {"HF_TOKEN": REDACTED, "WANDB_API_KEY": REDACTED, "RIG_TOKEN_DELAY_MS": "5"}
    assert not any(secret_looking(key) for key in recordable_keys())  # the adapter registry's names


@pytest.mark.parametrize("flag,value,expected", [
    ("--env", "LD_PRELOAD=/tmp/x.so", "dynamic loader"),
    ("--env", "PYTHONPATH=/tmp", "Python"),
    ("--env", "RIG_BOOT_ID=x", "set by rig"),
    ("--env", "RIG_IMAGE_TAG=a tag", "image tag"),
    ("--env", "OMP_NUM_THREADS=1\u200b", "control character"),
])
def test_rig_up_refuses_a_hostile_overlay_before_anything_starts(tmp_path, flag, value, expected):
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    result = rig_main("up", "tiny-cpu", flag, value, env=env)
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("command", ["up", "compare"])
@pytest.mark.parametrize("name,value", [("RIG_TOKEN_DELAY_MS", "abc"), ("RIG_TOKEN_DELAY_MS", "5"), ("DSV41_SHARED_PAD_BUF_ROWS", "64")])
def test_an_adapter_gate_in_rigs_own_environment_is_refused_for_a_native_boot(tmp_path, command, name, value):
    """A native server inherits rig's environment: a gate or setting exported in the shell would reach
    the engine without the boot check expecting its adapter ARMED (RIG_TOKEN_DELAY_MS=abc booted with
    exit 0 and token_delay REFUSED in the log). Refused in one line naming it, before anything is written."""
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state"), name: value}
    arms = ["--arm", "a:OMP_NUM_THREADS=1", "--arm", "b:OMP_NUM_THREADS=2"] if command == "compare" else []
    result = rig_cli(command, "tiny-cpu", *arms, env=env)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]  # (the adapter runtime in rig's own interpreter may say it refuses too)
    assert last.startswith(f"rig: environment: {name}: ") and f"rig up --env {name}=VALUE" in last, result.stderr
    assert value not in last and "Traceback" not in result.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists()


def test_a_gate_given_in_the_overlay_is_not_an_inherited_one():
    from rig.compare.arms import parse_arm
    from rig.deploy.recipe import load
    from rig.deploy.recipe_owned import refuse_inherited_gates

    resolved = load("tiny-cpu")
    refuse_inherited_gates(resolved, {"RIG_TOKEN_DELAY_MS": "5"}, {"RIG_TOKEN_DELAY_MS": "5", "HOME": "/root"})
    refuse_inherited_gates(parse_arm("a:RIG_TOKEN_DELAY_MS=5").resolve("tiny-cpu"), {}, {"RIG_TOKEN_DELAY_MS": "5"})
    with pytest.raises(RigError) as refused:
        refuse_inherited_gates(resolved, {}, {"RIG_TOKEN_DELAY_MS": "5"})
    assert refused.value.field == "RIG_TOKEN_DELAY_MS"
    compose = load("tiny-cpu-docker")  # a container gets only what its compose file names
    refuse_inherited_gates(compose, {}, {"RIG_TOKEN_DELAY_MS": "5"})


@pytest.mark.parametrize("command", ["up", "compare"])
def test_a_port_something_else_listens_on_is_refused_before_anything_is_written(tmp_path, command):
    """Another server on the port (say a tiny-cpu of the user's own): `rig up` and `rig compare`
    name the port and the way out in one line, and write no boot, state or comparison."""
    import socket

    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        arms = ["--arm", "a:RIG_TOKEN_DELAY_MS=0", "--arm", "b:RIG_TOKEN_DELAY_MS=1"] if command == "compare" else []
        result = rig_main(command, "tiny-cpu", *arms, "--port", port, env=env)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "--port" in result.stderr and "Traceback" not in result.stderr
    # rig has nothing of this recipe up: `rig down tiny-cpu` would stop nothing (something else holds the port)
    assert "`rig status` lists rig's boots; else a container" in result.stderr and "rig down" not in result.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists()


# ---- arm overlays ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,expected", [
    ("x:RIG_IMAGE_TAG=bad tag", "not an image tag"),
    ("x:RIG_IMAGE_TAG=.hidden", "not an image tag"),
    ("x:RIG_IMAGE_TAG=a/b", "not an image tag"),
    ("x:RIG_IMAGE_TAG=${RIG_API_KEY}", "not an image tag"),
    ("x:RIG_IMAGE_TAG=v1,RIG_IMAGE_TAG=v2", "set twice"),
    ("x:OMP_NUM_THREADS=1\u200b", "control character"),
])
def test_arm_image_tag_by_variable_takes_the_tag_grammar(spec, expected):
    from rig.compare.arms import parse_arm

    with pytest.raises(RigError, match=expected.replace("$", r"\$").replace("{", r"\{")) as caught:
        parse_arm(spec)
    assert "\n" not in str(caught.value)


def test_arm_image_tag_by_variable_is_the_image_arm():
    from rig.compare.arms import parse_arm

    arm = parse_arm("new:RIG_IMAGE_TAG=v2,RIG_TOKEN_DELAY_MS=0")
    assert arm.image_tag == "v2" and arm.env == {"RIG_TOKEN_DELAY_MS": "0"}
    assert arm.overlay() == {"RIG_TOKEN_DELAY_MS": "0", "RIG_IMAGE_TAG": "v2"}


@pytest.mark.parametrize("spec,expected", [
    ("x:LD_PRELOAD=/tmp/x.so", "dynamic loader"),
    ("x:PYTHONSTARTUP=/tmp/x.py", "Python"),
    ("x:RIG_API_KEY=k", "set by rig"),
    ("x:NCCL_NET_PLUGIN=/tmp/p.so", "plugin"),
    # a gate that is its adapter's amount, set to what the adapter would refuse in every boot
    ("x:RIG_TOKEN_DELAY_MS=abc", r"gates.RIG_TOKEN_DELAY_MS: RIG_TOKEN_DELAY_MS='abc' is not a number"),
    ("x:RIG_TOKEN_DELAY_MS=-5", r"RIG_TOKEN_DELAY_MS must be a number in \(0, 60000\]"),
    ("x:RIG_TOKEN_DELAY_MS=nan", r"must be a number in"),
])
def test_arm_overlay_refuses_hooks_and_rig_names(spec, expected):
    from rig.compare.arms import check_arms, parse_arm, recorded_spec

    with pytest.raises(RigError, match=expected) as caught:
        check_arms("tiny-cpu", [parse_arm(spec)])
    assert str(caught.value).startswith(f"command line: --arm {recorded_spec(spec)}") and "\n" not in str(caught.value)


@pytest.mark.parametrize("spec", ["x:X=$HOME", "x:X=a${B}", "x:RIG_TOKEN_DELAY_MS=1,X=$$"])
def test_an_arm_value_that_breaks_a_recipe_rule_names_its_key_not_a_class(spec):
    """A value the recipe's grammar refuses (a `$` compose would substitute) is refused naming the arm
    and the key, with the rule and a fix: never the name of the model that checked it."""
    from rig.compare.arms import check_arms, parse_arm, recorded_spec
    from rig.errors import Invalid

    with pytest.raises(Invalid) as caught:
        check_arms("tiny-cpu", [parse_arm(spec)])
    assert caught.value.where == "command line" and caught.value.field == f"--arm {recorded_spec(spec)} X"
    assert "\n" not in str(caught.value) and "Variant" not in str(caught.value) and caught.value.fix


def test_a_secret_in_an_arm_is_passed_through_not_recorded():
    from rig.compare.arms import parse_arm
    from rig.redaction import REDACTED, redact_for

    arm = parse_arm("x:HF_TOKEN=hf_planted,RIG_TOKEN_DELAY_MS=0")
    resolved = arm.resolve("tiny-cpu")
    assert "HF_TOKEN" not in resolved.full_env()
    assert redact_for(resolved, arm.overlay())["HF_TOKEN"] == REDACTED
    assert arm.overlay()["HF_TOKEN"] == "hf_planted"  # the server gets it ...
    assert arm.spec == f"x:HF_TOKEN={REDACTED},RIG_TOKEN_DELAY_MS=0" and "hf_planted" not in arm.model_dump_json()  # ... nothing else


def test_a_secret_in_an_arm_reaches_no_plan_entry_or_progress_line_and_a_resume_takes_it_again(tmp_path, monkeypatch, capsys):
    """The comparison's own files and lines: plan.json, the boot entries, the progress lines, the
    one-line refusal of a malformed arm; and a resumed comparison boots with the value its own
    command line gives (the plan holds none)."""
    from rig.boot import BootFailed
    from rig.compare import run as compare_run
    from rig.compare.arms import parse_arm
    from rig.compare.model import ComparePlan
    from rig.redaction import REDACTED

    with pytest.raises(RigError) as caught:
        parse_arm("x:HF_TOKEN=hf_planted,BROKEN")  # a comma inside the value: its rest is not shown either
    assert "hf_planted" not in str(caught.value) and "BROKEN" not in str(caught.value) and "not KEY=VALUE" in str(caught.value)
    overlays = []

    class Refusing:  # the driver sees what the server would get, and refuses (nothing boots here)
        def up(self, resolved, overlay, **kwargs):
            overlays.append(dict(overlay))
            if len(overlays) == 2:  # the first run stops at arm b's boot, refused before it started
                raise RigError("planted", "port", "in use", "stop it")
            raise BootFailed("refused on purpose")

    monkeypatch.setattr(compare_run, "driver_for", lambda resolved: Refusing())
    arms = [parse_arm("a:RIG_TOKEN_DELAY_MS=0"), parse_arm("b:RIG_TOKEN_DELAY_MS=0,HF_TOKEN=hf_planted")]
    plan = ComparePlan(recipe="tiny-cpu", arms=arms, control=None, boots=1, rounds=1, scenarios=["prose-c1"], small=True,
                       boot_state_control=False)
    with pytest.raises(RigError, match="in use"):
        compare_run.run_compare(plan, tmp_path, progress=True)
    again = [parse_arm("a:RIG_TOKEN_DELAY_MS=0"), parse_arm("b:RIG_TOKEN_DELAY_MS=0,HF_TOKEN=hf_planted")]
    compare_run.run_compare(plan.model_copy(update={"arms": again}), tmp_path, progress=True)  # resumed
    assert [o.get("HF_TOKEN") for o in overlays] == [None, "hf_planted", "hf_planted"], overlays
    written = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not any(b"hf_planted" in data for data in written)
    assert "hf_planted" not in capsys.readouterr().out
    assert ComparePlan.read(tmp_path).arms[1].env["HF_TOKEN"] == REDACTED
    # A plan written before arms were redacted (the secret in clear) is read, and shown, redacted.
    data = json.loads((tmp_path / "plan.json").read_text())
    data["arms"][1]["spec"] = "b:RIG_TOKEN_DELAY_MS=0,HF_TOKEN=hf_planted"
    data["arms"][1]["env"]["HF_TOKEN"] = "hf_planted"
    (tmp_path / "plan.json").write_text(json.dumps(data))
    assert ComparePlan.read(tmp_path).arms[1].spec == "b:RIG_TOKEN_DELAY_MS=0,HF_TOKEN=hf_planted"
    compare_run.run_compare(plan.model_copy(update={"arms": again}), tmp_path, progress=True)  # resumes it
    assert "hf_planted" not in capsys.readouterr().out


@pytest.mark.parametrize("pair", ["HTTPS_PROXY=http://user:hf_planted@proxy:3128", "DATABASE_URL=postgres://app:hf_planted@db/x",
                                  "UPSTREAM_SETTING"])
def test_an_arms_secret_by_its_value_or_from_the_environment_reaches_no_file_or_line(tmp_path, monkeypatch, capsys, pair):
    """Credentials inside a value (a proxy's or a database's URL) are a secret whatever the name;
    a key alone takes its value from rig's environment, so it never reaches argv, and is never
    written down either. The server gets each value; the plan, read back, resumes."""
    from rig.boot import BootFailed
    from rig.compare import run as compare_run
    from rig.compare.arms import parse_arm
    from rig.compare.model import ComparePlan

    monkeypatch.setenv("UPSTREAM_SETTING", "hf_planted")
    overlays = []

    unsets = []

    class Refusing:  # the driver sees what the server would get, and refuses (nothing boots here)
        def up(self, resolved, overlay, **kwargs):
            overlays.append(dict(overlay))
            unsets.append(set(kwargs.get("unset", ())))
            raise BootFailed("refused on purpose")

    monkeypatch.setattr(compare_run, "driver_for", lambda resolved: Refusing())
    key = pair.partition("=")[0]

    def arms() -> list:
        return [parse_arm("a:RIG_TOKEN_DELAY_MS=0"), parse_arm(f"b:RIG_TOKEN_DELAY_MS=0,{pair}")]

    assert "hf_planted" not in arms()[1].resolve("tiny-cpu").full_env().get(key, "")
    plan = ComparePlan(recipe="tiny-cpu", arms=arms(), control=None, boots=1, rounds=1, scenarios=["prose-c1"], small=True,
                       boot_state_control=False)
    compare_run.run_compare(plan, tmp_path, progress=True)
    compare_run.run_compare(plan.model_copy(update={"arms": arms()}), tmp_path, progress=True)  # resumed
    assert any("hf_planted" in o.get(key, "") for o in overlays), overlays
    # arm a sets no such key: its boots do not inherit it from rig's environment (a native server would)
    assert all(key in unset for o, unset in zip(overlays, unsets) if key not in o) and any(key not in o for o in overlays)
    written = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not any(b"hf_planted" in data for data in written)
    assert "hf_planted" not in capsys.readouterr().out
    assert "hf_planted" not in ComparePlan.read(tmp_path).arms[1].model_dump_json()


def test_a_key_alone_that_the_environment_lacks_is_refused_in_one_line(monkeypatch):
    from rig.compare.arms import parse_arm

    monkeypatch.delenv("UPSTREAM_SETTING", raising=False)
    with pytest.raises(RigError) as caught:
        parse_arm("b:RIG_TOKEN_DELAY_MS=0,UPSTREAM_SETTING")
    assert caught.value.field == "--arm" and "UPSTREAM_SETTING" in caught.value.fix


def test_a_plan_on_disk_is_parsed_again(tmp_path):
    from rig.compare.arms import parse_arm
    from rig.compare.model import ComparePlan

    plan = ComparePlan(recipe="tiny-cpu-docker", arms=[parse_arm("a:image=v1"), parse_arm("b:image=v2")], control=None,
                       boots=1, rounds=1, scenarios=["prose-c1"], small=True)
    plan.write(tmp_path)
    assert [arm.image_tag for arm in ComparePlan.read(tmp_path).arms] == ["v1", "v2"]
    data = json.loads((tmp_path / "plan.json").read_text())
    data["arms"][1]["image_tag"] = "v2; curl x"  # the spec still says image=v2
    (tmp_path / "plan.json").write_text(json.dumps(data))
    from rig.errors import Damaged

    with pytest.raises(Damaged, match="does not match its spec"):
        ComparePlan.read(tmp_path)
    data["arms"][1] = {**data["arms"][1], "image_tag": None, "spec": "b:LD_PRELOAD=/x.so", "env": {"LD_PRELOAD": "/x.so"}}
    (tmp_path / "plan.json").write_text(json.dumps(data))
    plan = ComparePlan.read(tmp_path)  # the spec parses; resolving it against the recipe refuses the hook
    from rig.compare.arms import check_arms

    with pytest.raises(RigError, match="dynamic loader"):
        check_arms("tiny-cpu-docker", plan.arms)


@pytest.mark.parametrize("edit", [{"slos": {"bogus": -1.0}}, {"slos": {"ttft": -1.0}}, {"slos": {"tpot": 1e308}},
                                  {"workers": 10**9}, {"workers": 0}])
def test_a_plan_on_disk_holds_slos_and_workers_to_the_command_lines_grammar(tmp_path, edit):
    """An edited plan.json's SLO (a KeyError voided every boot of the resume) or worker count is
    refused where the plan is read, in one line."""
    from rig.compare.arms import parse_arm
    from rig.compare.model import ComparePlan
    from rig.errors import Damaged

    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:RIG_TOKEN_DELAY_MS=0"), parse_arm("b:RIG_TOKEN_DELAY_MS=1")],
                       control=None, boots=1, rounds=1, scenarios=["prose-c1"], small=True, slos={"ttft": 2.0})
    plan.write(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps({**json.loads((tmp_path / "plan.json").read_text()), **edit}))
    with pytest.raises(Damaged):
        ComparePlan.read(tmp_path)


# ---- files: only regular ones, with a size cap ------------------------------------------------


def test_a_recipe_that_is_a_device_pipe_or_directory_is_refused_without_reading(tmp_path):
    zero = tmp_path / "zero" / "tiny-cpu.yaml"
    zero.parent.mkdir()
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo" / "tiny-cpu.yaml"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    for path in (zero, fifo):
        result = rig_cli("validate", str(path), timeout=60)  # /dev/zero read to the end, or a FIFO waited on, would hang
        assert result.returncode == 1 and "not a regular file" in result.stdout, result.stdout + result.stderr
        assert len(result.stdout.strip().splitlines()) == 1
    grown = tmp_path / "big" / "tiny-cpu.yaml"
    grown.parent.mkdir()
    grown.write_bytes(b"# " + b"x" * (300 << 10))
    with pytest.raises(RigError, match=r"larger than this file may be \(262144 at most\)"):
        parse_recipe(grown)


def test_the_reader_never_reads_past_its_cap(tmp_path, monkeypatch):
    """A file that grows while being read (st_size said small) is refused after cap + 1 bytes."""
    from rig.strict_yaml import read_regular

    path = tmp_path / "growing.yaml"
    path.write_bytes(b"a: 1\n")
    reads: list[int] = []
    real_read = os.read

    def endless(fd, size):
        reads.append(size)
        real_read(fd, size)
        return b"x" * size

    monkeypatch.setattr(os, "read", endless)
    with pytest.raises(RigError, match="larger than this file may be"):
        read_regular(path, 1000)
    assert sum(reads) <= 1001


# ---- render: all or nothing ------------------------------------------------------------------


def _halfway_recipe(tmp_path: Path) -> Path:
    def change(data):
        data["name"] = "zz-halfway"
        data["variants"] = {f"v{i}": {"description": f"variant {i}"} for i in range(4)}
        data["default_variant"] = "v0"
    return write_recipe(tmp_path, "tiny-cpu-docker", change)


def test_render_failing_halfway_leaves_the_tree_byte_identical(tmp_path, monkeypatch, rendered_copy):
    import rig.atomic as atomic
    from rig.deploy.render import render

    before = tree(rendered_copy / "docker", rendered_copy / "compose")
    stale = rendered_copy / "compose" / "tiny-cpu.yaml"  # an existing file is rewritten too, and must come back
    stale_text = stale.read_text()
    paths = [_halfway_recipe(tmp_path), REPO / "recipes" / "tiny-cpu.yaml"]
    real_replace = os.replace
    try:
        for fail_at in (1, 3, 6):
            calls = []

            def failing(src, dst, *, _fail_at=fail_at, _calls=calls):
                _calls.append(dst)
                if len(_calls) == _fail_at:
                    raise OSError(errno.ENOSPC, "No space left on device", str(dst))
                return real_replace(src, dst)

            stale.write_text(stale_text + "# stale\n")
            middle = tree(rendered_copy / "docker", rendered_copy / "compose")
            monkeypatch.setattr(atomic.os, "replace", failing)
            with pytest.raises(RigError, match="nothing was changed") as caught:
                render(paths)
            monkeypatch.setattr(atomic.os, "replace", real_replace)
            assert "\n" not in str(caught.value) and len(calls) == fail_at
            assert tree(rendered_copy / "docker", rendered_copy / "compose") == middle, f"failure at rename {fail_at} left a partial render"
    finally:
        monkeypatch.setattr(atomic.os, "replace", real_replace)
        stale.write_text(stale_text)
    assert tree(rendered_copy / "docker", rendered_copy / "compose") == before
    assert not (rendered_copy / "docker" / "zz-halfway").exists()


def test_render_failing_on_a_too_long_name_writes_nothing(tmp_path, rendered_copy):
    """A name past the filesystem's limit (only reachable by skipping validation): staged, failed, gone."""
    from rig.atomic import write_files_atomic
    from rig.deploy.render import rendered_files

    recipe = parse_recipe(_halfway_recipe(tmp_path))
    long = recipe.model_copy(update={"variants": {**recipe.variants, "w" * 300: recipe.variants["v1"]}})
    files = rendered_files(long)
    before = tree(rendered_copy / "docker", rendered_copy / "compose")
    with pytest.raises(OSError) as caught:
        write_files_atomic(files)
    assert caught.value.errno == errno.ENAMETOOLONG
    assert tree(rendered_copy / "docker", rendered_copy / "compose") == before


def test_render_refuses_interpolation_that_slipped_past_the_schema():
    import rig.deploy.render as render

    recipe = parse_recipe(REPO / "recipes" / "tiny-cpu.yaml")
    for change in ({"env": {"OMP_NUM_THREADS": "${RIG_API_KEY}"}}, {"server_args": ["--device", "$HOME"]}):
        with pytest.raises(RigError, match="nothing was rendered"):
            render.rendered_files(recipe.model_copy(update=change))
    owned = recipe.model_copy(update={"server_args": ["--device", "cpu", "--host=0.0.0.0"]})
    with pytest.raises(RigError, match="--host"):
        render.rendered_files(owned)


def test_compose_interpolations_grammar():
    assert grammar.compose_interpolations("$$HOME and $$") == []
    assert grammar.compose_interpolations("${A:-${B:-x}} $C ${D?e} $") == ["A", "B", "C", "D", "$"]
    assert grammar.compose_interpolations("--x=${RIG_API_KEY}") == ["RIG_API_KEY"]


# ---- name collisions -----------------------------------------------------------------------------


def test_a_dash_and_a_variant_never_share_a_project_or_a_boot(tmp_path, monkeypatch):
    import rig.boot.state as base
    from rig.deploy.render import compose_path, compose_project

    def plain(data):
        data["name"] = "h-b"
        data.pop("variants")
        data.pop("default_variant")

    def with_variant(data):
        data["name"] = "h"
        data["variants"] = {"b": {"description": "b"}}
        data.pop("default_variant")

    dashed = parse_recipe(write_recipe(tmp_path / "1", "tiny-cpu-docker", plain)).variant(None)
    variant = parse_recipe(write_recipe(tmp_path / "2", "tiny-cpu-docker", with_variant)).variant("b")
    assert compose_project(dashed) != compose_project(variant)
    assert compose_path(dashed) != compose_path(variant)
    assert (compose_project(dashed), compose_project(variant)) == ("rig-h-b", "rig-h_b")
    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path))
    for boot_id in ("20260101-000000-h-b-0a1b", "20260101-000001-h.b-0a1c", "20260101-000002-h-0a1d"):
        (tmp_path / "boots" / boot_id).mkdir(parents=True)
        (tmp_path / "boots" / boot_id / "boot.json").write_text("{}")
    assert [p.parent.name for p in base.boots_of("h")] == ["20260101-000001-h.b-0a1c", "20260101-000002-h-0a1d"]
    assert [p.parent.name for p in base.boots_of("h-b")] == ["20260101-000000-h-b-0a1b"]
    assert base.state_path("h") != base.state_path("h-b")


def test_two_recipe_files_rendering_the_same_path_are_refused(tmp_path):
    from rig.deploy.render import render

    first = write_recipe(tmp_path / "a", "tiny-cpu", put("description", "one"))
    second = write_recipe(tmp_path / "b", "tiny-cpu", put("description", "two"))
    before = tree(REPO / "docker", REPO / "compose")
    with pytest.raises(RigError, match="another recipe renders too"):
        render([first, second])
    assert tree(REPO / "docker", REPO / "compose") == before


# ---- state paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [("logs", "../../x"), ("down", "../x"), ("chat", "a/../b", "hi"), ("logs", "tiny-cpu:../x"),
                                     ("down", "tiny-cpu/.."), ("logs", "*")])
def test_state_commands_check_the_name(tmp_path, command):
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state" / "deep")}
    result = rig_main(*command, env=env)
    assert result.returncode == 2 and "is not a recipe name" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def _record(root: Path, **changes) -> dict:
    boot_id = "20260101-000000-tiny-cpu.cb-0000"
    boot_dir = root / "results" / "boots" / boot_id
    return {"boot_id": boot_id, "ref": "tiny-cpu:cb", "recipe": "tiny-cpu", "variant": "cb", "driver": "native",
            "base_url": "http://127.0.0.1:8321", "boot_dir": str(boot_dir), "log_path": str(boot_dir / "server.log"),
            "manifest_dir": str(boot_dir / "manifests"), "overlay": {}, "started": 1.0, "healthy_after_s": 1.0,
            "stopped": None, "status": "healthy", "served_model": "m", "pid": 999_999_999, "pid_start_ticks": None,
            "kernel_boot_time": None, "compose_project": None, "compose_files": [], "image": {}, "error": None, **changes}


@pytest.mark.parametrize("case", ["log elsewhere", "boot dir elsewhere", "boot id of another recipe", "foreign compose file",
                                  "state is a device"])
def test_a_state_file_cannot_point_outside_its_boot(tmp_path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not for rig logs")
    changes = {"log elsewhere": {"log_path": str(outside / "secret.txt")},
               "boot dir elsewhere": {"boot_dir": str(outside)},
               "boot id of another recipe": {"boot_id": "20260101-000000-other-0000"},
               "foreign compose file": {"driver": "compose", "compose_project": "rig-tiny-cpu_cb",
                                        "compose_files": [str(outside / "evil.yaml")]},
               "state is a device": {}}[case]
    state = tmp_path / "state" / "tiny-cpu.json"
    state.parent.mkdir()
    if case == "state is a device":
        state.symlink_to("/dev/zero")
    else:
        state.write_text(json.dumps(_record(tmp_path, **changes)))
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    before = tree(tmp_path)
    for command in (("logs", "tiny-cpu"), ("down", "tiny-cpu"), ("status",)):
        result = rig_main(*command, env=env, timeout=60)
        output = result.stdout + result.stderr
        assert result.returncode in (1, 2) and "Traceback" not in output, (command, output)
        assert len(output.strip().splitlines()) == 1 and f"{state}: " in output, (command, output)
        assert "not for rig logs" not in output
    assert tree(tmp_path) == before


# ---- YAML 1.1 vs 1.2, the reader itself -----------------------------------------------------------


@pytest.mark.parametrize("text,ok", [
    ("a: 017620", False), ("a: yes", False), ("a: No", False), ("a: on", False), ("a: 1:20", False), ("a: 0o17", False),
    ("a: 1_000", False), ("a: 0b101", False), ("a: 08", False), ("a: 1e3", False), ("a: 2024-01-01", False), ("yes: 1", False),
    ("a: 8080", True), ("a: '017620'", True), ("a: \"yes\"", True), ("a: 0.957", True), ("a: true", True), ("a: ~", True),
    ("a: -1", True), ("a: 0x1F", True), ("a: .inf", True), ("a: text, with a comma", True), ("a: v1.2.3", True),
])
def test_ambiguous_scalars(text, ok):
    from rig.strict_yaml import YamlRefused, load_strict

    if ok:
        load_strict(text.encode())
    else:
        with pytest.raises(YamlRefused, match="YAML 1.1 readers"):
            load_strict(text.encode())


def test_every_file_rig_ships_reads_strictly():
    from rig.strict_yaml import load_yaml_file

    for path in [*REPO.glob("recipes/*.yaml"), *REPO.glob("loadtests/**/*.yaml"), *REPO.glob("rig/**/*.yaml")]:
        load_yaml_file(path)


# ---- IPv6 binds in the compose override -----------------------------------------------------------


def test_compose_override_brackets_an_ipv6_bind_and_compose_accepts_it(tmp_path):
    from conftest import COMPOSE_ENV, compose_binary

    from rig.boot.compose import override_file
    from rig.deploy.render import render_compose

    resolved = parse_recipe(write_recipe(tmp_path, "tiny-cpu-docker", put("serving.bind", "::1"))).variant(None)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(render_compose(resolved))
    text, secrets = override_file(resolved, {"HF_TOKEN": "hf_x", "OMP_NUM_THREADS": "$PLANTED"}, "boot-1", 9000)
    override = tmp_path / "override.yaml"
    override.write_text(text)
    assert "hf_x" not in text and secrets == {"HF_TOKEN": "hf_x"}
    port = resolved.recipe.serving.port
    assert yaml.safe_load(text.replace("!override", ""))["services"]["server"]["ports"] == [f"[::1]:9000:{port}"]
    result = subprocess.run([compose_binary(), "-f", str(rendered), "-f", str(override), "config", "--format", "json"],
                            capture_output=True, text=True, env={**os.environ, **COMPOSE_ENV, "HF_TOKEN": "hf_x", "PLANTED": "7"}, check=False)
    assert result.returncode == 0, result.stderr
    service = json.loads(result.stdout)["services"]["server"]
    assert [(p["host_ip"], p["published"]) for p in service["ports"]] == [("::1", "9000")]
    # Written $$PLANTED: a literal (config prints it escaped again), never the variable's 7.
    assert service["environment"]["OMP_NUM_THREADS"] == "$$PLANTED" and service["environment"]["HF_TOKEN"] == "hf_x"
    for bind in ("::1", "fe80::2"):
        document = yaml.safe_load(render_compose(parse_recipe(write_recipe(tmp_path / bind.replace(":", "_"), "tiny-cpu-docker",
                                                                                 put("serving.bind", bind))).variant(None)))
        assert document["services"]["server"]["ports"] == [f"[{bind}]:{port}:{port}"]


def test_regex_patterns_run_in_linear_time_on_adversarial_logs():
    """(a+)+$ and (x|xy)*z backtrack exponentially in Python's re; under RE2 they are plain patterns."""
    from rig.boot.checks import check_log
    from rig.deploy.recipe_model import BootLog

    line = "a" * 200_000 + "!"
    done = threading.Event()

    def scan():
        check_log(line + "\n" + "xy" * 100_000, BootLog(must=["(a+)+$"], forbid=["(x|xy)*z", "(a|aa)*b"]))
        done.set()

    worker = threading.Thread(target=scan, daemon=True)
    worker.start()
    worker.join(120)  # exponential backtracking would take longer than the universe; RE2 takes milliseconds
    assert done.is_set()


# ---- security: what a crafted state file or environment must not make rig do -----------------------

def _state(root, **changes):
    from rig.boot.record import BootRecord

    boot_dir = root / "results" / "boots" / "20260101-000000-tiny-cpu-docker.cb-0a1b"
    record = BootRecord(boot_id=boot_dir.name, ref="tiny-cpu-docker:cb", recipe="tiny-cpu-docker", variant="cb",
                        driver="compose", base_url="http://127.0.0.1:8331", boot_dir=str(boot_dir),
                        log_path=str(boot_dir / "server.log"), manifest_dir=str(boot_dir / "manifests"),
                        compose_project="rig-tiny-cpu-docker_cb", status="healthy")
    data = json.loads(record.model_dump_json())
    data.update(changes)
    path = root / "state" / "tiny-cpu-docker.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("changes, field", [
    ({"compose_project": "rig-victim"}, "compose_project"),       # another recipe's project, still rig-shaped
    ({"compose_project": "production_db"}, "compose_project"),    # a project rig never named
    ({"compose_project": ""}, "compose_project"),                 # an empty name must never reach docker
    ({"compose_project": None}, "compose_project"),
    ({"driver": "evil"}, "driver"),                               # an unknown driver must not fall back to compose
    ({"driver": "native", "compose_project": "rig-tiny-cpu-docker_cb"}, "compose_project"),
])
def test_rig_down_refuses_a_state_that_names_what_rig_does_not_own(tmp_path, monkeypatch, changes, field):
    from rig.boot.record import BootRecord
    from rig.errors import Damaged

    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RIG_STATE_DIR", str(tmp_path / "state"))
    path = _state(tmp_path, **changes)
    with pytest.raises(Damaged) as caught:
        BootRecord.load(path)
    assert caught.value.field == field and "\n" not in str(caught.value)
    # The real command, in its own process: refused in one line before any driver is asked to stop anything.
    result = rig_cli("down", "tiny-cpu-docker", env={"RIG_RESULTS_DIR": str(tmp_path / "results"),
                                                      "RIG_STATE_DIR": str(tmp_path / "state"), "PATH": "/nonexistent"})
    assert result.returncode == 2 and field in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("key", ["sk-planted\nX-Injected: 1", " sk-planted", "sk-planted\t", "sk-plan\x7fted"])
def test_an_api_key_with_whitespace_or_a_control_character_is_refused_without_being_shown(monkeypatch, key):
    from rig import client
    from rig.errors import Invalid

    monkeypatch.setenv("RIG_API_KEY", key)
    with pytest.raises(Invalid) as caught:
        client.auth_headers()
    assert "planted" not in str(caught.value) and "plan" not in str(caught.value).split("RIG_API_KEY")[-1].split(";")[0]
    assert caught.value.field == "RIG_API_KEY"


# ---- the command line: every option through its grammar, refused in one line before anything runs ----

ARMS = ["--arm", "a:RIG_TOKEN_DELAY_MS=0", "--arm", "b:RIG_TOKEN_DELAY_MS=1"]
CLI_CASES = {
    "arm name with shell metacharacters": ["compare", "tiny-cpu", "--arm", "a;rm -rf ~:X=1", "--arm", "b:X=2"],
    "arm name of 300 characters": ["compare", "tiny-cpu", "--arm", "a" * 300 + ":X=1", "--arm", "b:X=2"],
    "10,000 arms": ["compare", "tiny-cpu", *[f"--arm=a{i}:X={i}" for i in range(10_000)]],
    "a misspelled gate in an arm": ["compare", "tiny-cpu", "--arm", "a:RIG_TOKEN_DELAY_MS=0", "--arm", "b:RIG_TOKEN_DELAY=3"],
    "a rig name nothing reads in --env": ["up", "tiny-cpu", "--env", "RIG_FOO=1"],
    "a resume of a directory that does not exist": ["compare", "tiny-cpu", *ARMS, "--resume", "/nonexistent/compare/1"],
    "a resume of an empty name": ["compare", "tiny-cpu", *ARMS, "--resume", ""],
    "an arm with an empty entry": ["compare", "tiny-cpu", "--arm", "a:RIG_TOKEN_DELAY_MS=0,,X=1", "--arm", "b:RIG_TOKEN_DELAY_MS=1"],
    "an image arm on a native recipe": ["compare", "tiny-cpu", "--arm", "a:image=v1", "--arm", "b:image=v2"],
    "a gate value up cannot arm": ["up", "tiny-cpu", "--env", "RIG_TOKEN_DELAY_MS=abc"],
    "a colon and no variant": ["up", "tiny-cpu:"],
    "a fingerprint glob that matches no condition": ["compare", "tiny-cpu", *ARMS, "--accept-fingerprint", "hostname"],
    "max boots without a target": ["compare", "tiny-cpu", *ARMS, "--max-boots", "4"],
    "an SLO given twice": ["compare", "tiny-cpu", *ARMS, "--goodput", "tpot<=50ms,tpot<=40ms"],
    "control named like an arm": ["compare", "tiny-cpu", *ARMS, "--control", "a:RIG_TOKEN_DELAY_MS=3"],
    "a NaN SLO": ["compare", "tiny-cpu", *ARMS, "--goodput", "ttft<=nans"],
    "an infinite SLO": ["compare", "tiny-cpu", *ARMS, "--goodput", "tpot<=infms"],
    "a fingerprint glob with a slash": ["compare", "tiny-cpu", *ARMS, "--accept-fingerprint", "../../etc/*"],
    "a NaN duration": ["compare", "tiny-cpu", *ARMS, "--duration", "nan"],
    "an infinite duration": ["loadtest", "tiny-cpu", "--duration", "inf"],
    "a window of a millisecond": ["loadtest", "tiny-cpu", "--duration", "0.001"],
    "a comparison's rounds of half a second": ["compare", "tiny-cpu", *ARMS, "--duration", "0.5"],
    "a NaN target": ["compare", "tiny-cpu", *ARMS, "--target", "nan"],
    "a billion boots": ["compare", "tiny-cpu", *ARMS, "--boots", "1000000000"],
    "a billion rounds": ["compare", "tiny-cpu", *ARMS, "--rounds", "1000000000"],
    "a malformed URL": ["loadtest", "--url", "http://[::1"],
    "a URL of another scheme": ["loadtest", "--url", "file:///etc/passwd"],
    "a URL with a newline": ["loadtest", "--url", "http://127.0.0.1:1/\nX"],
    "a negative GEMM shape": ["kernelbench", "--n", "-5"],
    "a GEMM M list with a word": ["kernelbench", "--m", "6,abc"],
    "an unknown command": ["nosuch"],
    "a boot id that is a path": ["audit", "llama8b-h200", "--boot", "../../../etc"],
    "a served model name with a newline": ["loadtest", "--url", "http://127.0.0.1:9/", "--model", "m\nX"],
    "a boot identity with a space": ["loadtest", "--url", "http://127.0.0.1:9/", "--boot-id", "a b"],
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_every_command_line_option_is_refused_in_one_line(tmp_path, case):
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    result = rig_main(*CLI_CASES[case], env=env, timeout=60)
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-500:])
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "fix:" in result.stderr and not (tmp_path / "results").exists()


# ---- rig audit: a checkpoint's config.json is input --------------------------------------------------

def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _sparse(path: Path) -> None:
    path.touch()
    os.truncate(path, 3 << 30)


MODEL_CONFIGS = {
    "a FIFO": _fifo,
    "a sparse 3 GB file": _sparse,
    "a link to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "negative dimensions": lambda path: path.write_text('{"hidden_size": -4096, "num_attention_heads": 32}'),
    "a dimension of 2^40": lambda path: path.write_text('{"hidden_size": 1099511627776}'),
    "a dimension that is a boolean": lambda path: path.write_text('{"hidden_size": true}'),
    "a dimension that is text": lambda path: path.write_text('{"hidden_size": "4096"}'),
    "a dimension that is text, beside the heads it is divided by": lambda path: path.write_text(
        '{"hidden_size": "4096", "num_attention_heads": 32}'),
    "a head count that is text": lambda path: path.write_text('{"hidden_size": 4096, "num_attention_heads": "32"}'),
    "duplicate keys": lambda path: path.write_text('{"hidden_size": 4096, "hidden_size": 8}'),
    "NaN": lambda path: path.write_text('{"hidden_size": NaN}'),
    "not an object": lambda path: path.write_text("[4096]"),
    "a depth bomb": lambda path: path.write_text('{"hidden_size": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "not UTF-8": lambda path: path.write_bytes(b'{"hidden_size": 4096, "\xff": 1}'),
}


@pytest.mark.parametrize("case", sorted(MODEL_CONFIGS))
def test_rig_audit_refuses_a_crafted_config_json_in_one_line(tmp_path, case):
    model = tmp_path / "model"
    model.mkdir()
    MODEL_CONFIGS[case](model / "config.json")
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    result = rig_main("audit", "llama8b-h200", "--model-dir", str(model), env=env, timeout=60)  # a hang fails here
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-500:])
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "config.json" in result.stderr and "fix:" in result.stderr and not (tmp_path / "results").exists()


def test_rig_audit_reads_a_real_checkpoint_config(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                                                   "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16",
                                                   "rope_scaling": {"factor": 8.0}}))
    result = rig_main("audit", "llama8b-h200", "--model-dir", str(model), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["dims_source"] == str(model / "config.json")


# ---- environment: RIG_MODEL_DIR is the checkpoint a compose file mounts and a tokenizer is read from --

@pytest.mark.parametrize("value", ["relative/model", "/models/../etc", "/models/a/../../etc", "/no/such/dir", "/models/\nX"])
def test_a_model_directory_that_is_not_an_absolute_directory_without_dotdot_is_refused(monkeypatch, value):
    from rig import paths
    from rig.errors import Invalid

    monkeypatch.setenv("RIG_MODEL_DIR", value)
    with pytest.raises(Invalid) as caught:
        paths.model_dir()
    assert caught.value.field == "RIG_MODEL_DIR" and "\n" not in str(caught.value)


def test_a_model_directory_that_exists_is_taken_as_it_is(monkeypatch, tmp_path):
    from rig import paths

    monkeypatch.setenv("RIG_MODEL_DIR", str(tmp_path))
    assert paths.model_dir() == tmp_path
    monkeypatch.setenv("RIG_MODEL_DIR", "")
    assert paths.model_dir() is None


def test_a_resume_whose_port_another_server_holds_is_refused_and_leaves_no_marker(tmp_path, monkeypatch):
    """A resume skips the up-front port check (its own interrupted boot may hold the port until it is
    stopped); the driver's refusal then leaves no in-progress marker, which a later resume would
    read as a server of ours to stop."""
    import socket

    from rig.cli_args import LoadOptions
    from rig.compare.arms import parse_arm
    from rig.compare.command import CompareRequest, compare
    from rig.compare.model import ComparePlan

    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RIG_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "results" / "compare" / "x"
    out.mkdir(parents=True)
    arms = ["a:RIG_TOKEN_DELAY_MS=0", "b:RIG_TOKEN_DELAY_MS=1"]
    ComparePlan(recipe="tiny-cpu", arms=[parse_arm(a) for a in arms], control=None, boots=1, rounds=1, scenarios=["prose-c1"],
                small=True, duration_s=2.0).write(out)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(RigError, match="already in use"):
            compare(CompareRequest("tiny-cpu", arms, boots=1, rounds=1, scenarios=["prose-c1"], load=LoadOptions(small=True),
                                   resume=str(out), duration_s=2.0, port=holder.getsockname()[1]), progress=False)
    assert not list(out.glob("boots/*.in-progress.json")) and not (tmp_path / "state").exists()


def test_a_results_path_that_cannot_be_written_is_one_line_not_a_traceback(tmp_path):
    """An OSError from any write (here: the results directory lies under a regular file; a full disk
    and a permission read the same) reaches the user as one line naming the path, and nothing starts."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    from conftest import free_port

    result = rig_cli("up", "tiny-cpu", "--port", str(free_port()),
                     env={"RIG_STATE_DIR": str(blocker / "state"), "RIG_RESULTS_DIR": str(blocker / "res")}, timeout=120)
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rig: {blocker}/") and "Not a directory; fix:" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("models_body", [b"null", b"[1, 2]", b'{"data": "x"}', b'{"data": [7]}', b'{"data": [{"id": 5}]}'])
def test_a_server_whose_model_list_is_not_one_is_refused_in_one_line(models_body):
    """`rig loadtest --url` against a server whose /v1/models is JSON of another shape: one line, no traceback."""
    import http.server

    from conftest import free_port

    from rig.loadrun.attach import attach

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(models_body)))
            self.end_headers()
            self.wfile.write(models_body)

        def log_message(self, *args):
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(RigError) as caught:
            attach(f"http://127.0.0.1:{port}", None, None, "b1")
    finally:
        server.shutdown()
        server.server_close()
    assert "\n" not in str(caught.value) and str(caught.value).startswith("command line: --"), caught.value


def test_a_damaged_tokenizer_is_one_line_naming_the_file(tmp_path):
    """A tokenizer.json cut short (a download stopped half way) or not one at all: Damaged, naming
    the file and the fix, not the tokenizers library's traceback."""
    from rig.errors import Damaged
    from rig.load.prompts import TokenCounter

    (tmp_path / "tokenizer_config.json").write_text("{}")
    for text in (b'{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0', b"[]", b'{"added_tokens": ["\xe9"]}'):
        (tmp_path / "tokenizer.json").write_bytes(text)  # cut, not a tokenizer, not UTF-8 (never read as replaced)
        with pytest.raises(Damaged) as caught:
            TokenCounter(str(tmp_path))
        assert str(caught.value).startswith(f"{tmp_path}/tokenizer.json: (file): not a tokenizer") and "\n" not in str(caught.value)


def test_decoding_through_a_dead_server_is_one_line(tmp_path):
    from conftest import free_port

    from rig.load.prompts import TokenCounter

    counter = TokenCounter(None, f"http://127.0.0.1:{free_port()}", "m")
    for call in (lambda: counter.encode("x"), lambda: counter.decode([1])):
        with pytest.raises(RigError, match="failed"):
            call()


def test_a_rig_installed_away_from_its_checkout_says_so_in_one_line(tmp_path):
    """`pip install .` (not -e) puts the package in site-packages, without the recipes, scenarios and
    locustfile of the checkout: every command refuses in one line with the install that works."""
    import shutil

    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "rig", site / "rig", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "rig", "validate"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(site)}, check=False)
    assert result.returncode == 2, result
    assert result.stderr.strip() == (f"rig: {site}: no recipes/ or loadtests/ beside the rig package (rig runs from its checkout); "
                                     "fix: install rig editable from its checkout: pip install -e . -e ./adapter (or `make setup`)")


def test_a_misspelled_recipe_name_gets_the_names_it_is_close_to(capsys):
    from rig.cli import main

    assert main(["validate", "tiny-cpuu"]) == 1
    assert "no such recipe; fix: did you mean tiny-cpu" in capsys.readouterr().out
    for command in ("down", "logs"):  # nothing is up: the misspelling is the problem, not "start it"
        assert main([command, "tiny-cpuu"]) == 2
        err = capsys.readouterr().err
        assert "no such recipe; fix: did you mean tiny-cpu" in err and len(err.strip().splitlines()) == 1, err


# an arm's KEY=VALUE -> (recipe, words of the refusal)
UNREAD_NAMES = {
    "RIG_TOKEN_DELAY=3": ("tiny-cpu", "no adapter reads RIG_TOKEN_DELAY, and rig does not set it; "
                          "fix: did you mean RIG_TOKEN_DELAY_MS (token_delay's gate)?"),
    "rig_token_delay_ms=3": ("tiny-cpu", "rig_token_delay_ms is not RIG_TOKEN_DELAY_MS: environment names are case-sensitive; "
                             "fix: write RIG_TOKEN_DELAY_MS"),
    "Dsv41_Shared_Pad_K=1": ("mia-tp4", "is not DSV41_SHARED_PAD_K: environment names are case-sensitive"),
    "RIG_GPU_DELAY_MS=40": ("llama8b-h200", "did you mean RIG_GPU_DELAY_US (gpu_delay's gate; its unit is us, not ms)?"),
    "RIG_API_KEYS=x": ("llama8b-h200", "did you mean RIG_API_KEY? rig sets that itself: remove it"),
    "rig_boot_id=x": ("tiny-cpu", "rig_boot_id is not RIG_BOOT_ID, which rig sets itself"),
    "RIG_FOO=1": ("tiny-cpu", "fix: use an adapter's gate or setting for transformers (`rig adapters list`): RIG_TOKEN_DELAY_MS"),
    "DSV41_SHARED_PAD=1": ("mia-tp4", "did you mean DSV41_SHARED_PAD_K (shared_pad_k's gate)?"),
}


@pytest.mark.parametrize("pair", sorted(UNREAD_NAMES))
def test_an_arm_naming_a_rig_variable_nothing_reads_is_refused_with_the_name_it_is_close_to(pair):
    """A misspelled gate would boot an arm identical to its baseline (a comparison of nothing)."""
    from rig.compare.arms import parse_arm

    recipe, words = UNREAD_NAMES[pair]
    with pytest.raises(RigError) as caught:
        parse_arm(f"b:{pair}").resolve(recipe)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_names_outside_rigs_namespaces_and_every_gate_and_setting_pass():
    from rig.deploy.recipe_owned import unread_rig_name
    from rig_adapters.registry import REGISTRY

    for spec in REGISTRY:
        for engine in spec.engines:
            assert all(unread_rig_name(name, engine) is None for name in (spec.gate, *spec.settings))
    for name in ("OMP_NUM_THREADS", "VLLM_USE_V1", "SGLANG_ENABLE_JIT_DEEPGEMM", "NCCL_DEBUG", "TRIGGER_X", "RIGTOKEN_DELAY_MS"):
        assert unread_rig_name(name, "vllm") is None, name
