"""Property: recipe documents with hostile values in every field never end in a
traceback, never write outside docker/, compose/, results/ or .rig/, and never render a value
that compose would interpolate (only rig's own variables and a recipe's declared host_env)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from conftest import REPO, recorded_writes, writes_outside
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import rig.deploy.k8s as k8s_module
import rig.deploy.render as render_module
from rig import grammar
from rig.deploy.recipe import parse_recipe
from rig.errors import RigError

BASES = {name: (REPO / "recipes" / f"{name}.yaml").read_text() for name in ("tiny-cpu", "tiny-cpu-docker", "mia-tp4", "glm52-tp6")}
HOSTILE = [
    "${RIG_API_KEY}", "$RIG_API_KEY", "$$", "${HOME:-x}", "$", "{", "}", "--host", "--port=1", "--api-key", "--api_key=x",
    "--conf", "--", "-tp", "-t", "--served-model-name", "LD_PRELOAD", "PYTHONPATH", "HF_TOKEN", "RIG_IMAGE_TAG", "\n", "\r",
    "\u200b", "\u202e", "\ufeff", "\x00", "\x1b[2J", "\u2028", "017620", "yes", "on", "1:20", "2024-01-01", "1e3", "0o17",
    "../../etc/passwd", "/dev/zero", "a" * 70, "x" * 300, "(a+)+$", "(?i)x", ".{0,999}", "(a)\\1", "fe80::1%eth0", "::1",
    "0.0.0.0", "*", ":", "#", "&a", "*a", "!!str", "<<", "'", '"', "\\", "%", "@", "latest", "sha256:" + "0" * 64, " ",
    "rig_api_key", "\t", "-", "/", "1", "0", "-1",
]
text = st.one_of(
    st.text(max_size=24),
    st.sampled_from(HOSTILE),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6)), min_size=1, max_size=4).map("".join),
)
values = st.one_of(
    text, text, text,
    st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.none(), st.floats(),
    st.lists(text, max_size=4), st.dictionaries(text, text, max_size=3),
)


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path in the document: leaves and containers (a container can be replaced whole)."""
    found = [path] if path else []
    if isinstance(node, dict):
        found += [leaf for key, item in node.items() for leaf in _leaves(item, (*path, key))]
    elif isinstance(node, list):
        found += [leaf for index, item in enumerate(node) for leaf in _leaves(item, (*path, index))]
    return found


TEXT_FIELDS = {"description", "version", "digest_source", "revision", "served_model_name", "fork"}
LIST_FIELDS = {"server_args", "must", "forbid"}
MAP_FIELDS = {"env", "gates", "host_env"}


def _free(path: tuple[Any, ...]) -> bool:
    """A free-text value: a text field, an entry of a list of text, or a value of an env-like map."""
    parent = path[-2] if len(path) > 1 else None
    if isinstance(path[-1], int):
        return parent in LIST_FIELDS
    return parent in MAP_FIELDS or path[-1] in TEXT_FIELDS


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, str]:
    """(file stem, YAML text): a shipped recipe with random fields replaced, keys added or renamed,
    dumped safely (quoted) or spliced in unquoted (raw YAML, so YAML 1.1 scalars reach the reader)."""
    base = draw(st.sampled_from(sorted(BASES)))
    if draw(st.integers(0, 3)) == 0:  # raw: replace the value of one `key: value` line with unquoted text
        lines = BASES[base].splitlines()
        candidates = [i for i, line in enumerate(lines) if ": " in line and not line.lstrip().startswith("#")]
        index = draw(st.sampled_from(candidates))
        key = lines[index].split(": ", 1)[0]
        lines[index] = f"{key}: {draw(text)}"
        return base, "\n".join(lines) + "\n"
    data = yaml.safe_load(BASES[base])
    if draw(st.booleans()):  # free-text fields and list entries: hostile values that may well validate and render
        for _ in range(draw(st.integers(1, 4))):
            *parents, last = draw(st.sampled_from([p for p in _leaves(data) if _free(p)]))
            node = data
            for part in parents:
                node = node[part]
            node[last] = draw(text)
        return base, yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    for _ in range(draw(st.integers(1, 6))):
        paths = _leaves(data)
        *parents, last = draw(st.sampled_from(paths))
        node = data
        for part in parents:
            node = node[part]
        action = draw(st.integers(0, 4))
        if action == 0 and isinstance(node, dict):  # rename the key
            node[draw(text)] = node.pop(last)
        elif action == 1 and isinstance(node, dict):  # add a key beside it
            node[draw(text)] = draw(values)
        else:
            node[last] = draw(values)
    name = data.get("name") if isinstance(data, dict) else None
    stem = name if isinstance(name, str) and grammar.is_recipe_name(name) else base
    return stem, yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


def _interpolations(document: Any, host_env: set[str]) -> list[str]:
    """Every interpolation in a compose document that is not rig's own (or a declared host_env name)."""
    bad = []
    for path, value in render_module._strings(document):
        for name in grammar.compose_interpolations(value):
            if name == grammar.KEY_VARIABLE:
                if not (path[-2:] == ("environment", name) and value == render_module.API_KEY_ENTRY):
                    bad.append(f"{'.'.join(path)}: {value!r}")
            elif name not in render_module.COMPOSE_VARIABLES and name not in host_env:
                bad.append(f"{'.'.join(path)}: {value!r}")
    return bad


def _check(stem: str, document: str, root: Path) -> str:
    """Check one document; returns "refused" or "rendered"."""
    folder = Path(tempfile.mkdtemp(dir=root))
    path = folder / f"{stem}.yaml"
    path.write_text(document, encoding="utf-8", errors="surrogatepass")
    out = root / "tree"  # the repository root of this example: it exists, docker/, compose/ and k8s/ do not yet
    out.mkdir()
    allowed = [out / "docker", out / "compose", out / "k8s", REPO / "results", REPO / ".rig"]
    refused = None
    with recorded_writes() as writes, \
            mock.patch.multiple(render_module, REPO_ROOT=out, DOCKER_DIR=out / "docker", COMPOSE_DIR=out / "compose"), \
            mock.patch.object(k8s_module, "K8S_DIR", out / "k8s"):
        try:
            recipe = parse_recipe(path)
            files = render_module.rendered_files(recipe)
            written = render_module.render([path])
        except RigError as error:
            refused = str(error)
    if refused is not None:  # one line, and nothing written anywhere
        assert "\n" not in refused and "\r" not in refused and "fix: " in refused, refused
        assert writes == [] and not any(out.iterdir()), writes
        return "refused"
    assert not writes_outside(writes, allowed), writes_outside(writes, allowed)
    assert set(written) <= set(files)
    host_env = {name for variant in [None, *recipe.variants] for name in recipe.variant(variant).host_env()}
    for target, content in files.items():
        assert target.read_text() == content
        if target.parent == out / "compose":
            assert not _interpolations(yaml.safe_load(content), host_env)
        if target.parent == out / "k8s":
            assert [d["kind"] for d in yaml.safe_load_all(content)][0] == "Service"
    return "rendered"


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(documents())
def test_hostile_recipe_documents(document):
    stem, text_ = document
    with tempfile.TemporaryDirectory() as root:
        event(_check(stem, text_, Path(root)))  # --hypothesis-show-statistics shows the split


def test_the_property_sees_writes_and_interpolations(tmp_path):
    """The checks themselves: a write outside is seen, an interpolation is seen."""
    with recorded_writes() as seen:
        (tmp_path / "elsewhere.txt").write_text("x")
        os.mkdir(tmp_path / "dir")
    assert writes_outside(seen, [REPO / "docker"]) == [str(tmp_path / "elsewhere.txt"), str(tmp_path / "dir")]
    document = {"services": {"server": {"command": ["--x", "${RIG_API_KEY}"], "environment": {"RIG_API_KEY": "${RIG_API_KEY:-}"}}}}
    assert _interpolations(document, set()) == ["services.server.command.1: '${RIG_API_KEY}'"]
    # A valid recipe renders under the redirected tree and nowhere else.
    assert _check("tiny-cpu", BASES["tiny-cpu"], tmp_path) == "rendered"
    assert (tmp_path / "tree" / "compose" / "tiny-cpu.yaml").exists()
