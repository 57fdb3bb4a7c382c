"""A bundle that carries its own version of a package the host provides (`replace_host`): the
spec says which and why, the build carries it and records the host's version, and the installer
puts it in a site of its own, ahead of the host's on the engine's path, and says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from synthetic_bundles import make_bundle, make_wheel

from rig.errors import Invalid
from rig.hosts import hostside, lock, spec

HASH = "--hash=sha256:"
LOCK = f"""engine==1.0 \\
    {HASH}{"a" * 64}
    # via -r requirements.in
transformers==5.12.1 \\
    {HASH}{"b" * 64}
    # via engine
tokenizers==0.22.2 \\
    {HASH}{"c" * 64}
    # via transformers
numpy==2.5.2 \\
    {HASH}{"d" * 64}
    # via engine
"""
WHY = "the engine raises at import under the host's newer version"
SIZE = 1 << 12


def _spec(**fields) -> spec.BundleSpec:
    return spec.BundleSpec.model_validate({"name": "engine-1.0", "requirements": ["engine==1.0"]} | fields)


def _profile() -> spec.HostProfile:
    return spec.HostProfile.model_validate({"name": "host", "python": "3.12", "platform": "x86_64-manylinux_2_39",
                                            "provides": {"transformers": "5.17.0", "tokenizers": "0.23.2", "numpy": "2.5.2"}})


def test_a_package_the_spec_replaces_is_carried_though_the_host_provides_it():
    entries = lock.parse_lock(LOCK)
    plain = lock.select(entries, _spec(), _profile())
    assert [e.name for e in plain.carried] == ["engine"]
    assert plain.provided == {"transformers": "5.12.1", "tokenizers": "0.22.2", "numpy": "2.5.2"}
    replacing = lock.select(entries, _spec(replace_host={"transformers": WHY, "Tokenizers": "transformers 5.12.1 needs <=0.23.0"}),
                            _profile())
    assert [e.name for e in replacing.carried] == ["engine", "tokenizers", "transformers"]
    assert replacing.provided == {"numpy": "2.5.2"}
    assert replacing.replaces_host["transformers"] == {"version": "5.12.1", "host": "5.17.0", "why": WHY}
    assert replacing.replaces_host["tokenizers"]["host"] == "0.23.2"


def test_a_replaced_package_the_engine_does_not_require_is_refused():
    with pytest.raises(Invalid, match="not among the resolved packages") as refused:
        lock.select(lock.parse_lock(LOCK), _spec(replace_host={"accelerate": WHY}), _profile())
    assert "replace_host.accelerate" in str(refused.value)


@pytest.mark.parametrize(("fields", "problem"), [
    ({"replace_host": {"transformers": WHY}, "leave_out_packages": {"transformers": "x"}}, "carried or left out"),
    ({"replace_host": {"transformers": " "}}, "gives no reason"),
    ({"replace_host": {"transformers==5.12.1": WHY}}, "is not a package name"),
])
def test_a_replacement_that_is_ambiguous_or_unexplained_is_refused_in_one_line(tmp_path, fields, problem):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "requirements": ["engine==1.0"]} | fields))
    with pytest.raises(Invalid, match=problem) as refused:
        spec.read_spec(str(path))
    assert "\n" not in str(refused.value) and "replace_host" in str(refused.value)


def _demo(folder: Path, version: str) -> Path:
    return make_wheel(folder, "demo-pkg", version, {"demo_pkg/__init__.py": f"VERSION = {version!r}\n".encode() + b"#\n" * 900})


def _host_with_demo_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host's own demo-pkg 2.0, installed by pip and on this interpreter's path."""
    host = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(host),
                    str(_demo(tmp_path / "host-src", "2.0"))], check=True, capture_output=True)
    monkeypatch.syspath_prepend(str(host))
    return host


@pytest.mark.parametrize("site_on_path", [False, True], ids=["plain", "site-on-pythonpath"])
def test_the_installed_site_shadows_the_host_version_on_its_path_and_says_so(tmp_path, monkeypatch, capsys, site_on_path):
    """The host's version is named, also when the installer itself runs with the site first on its
    path (benchmarks/gpu-host/step.sh exports PYTHONPATH=SITE before it installs)."""
    host = _host_with_demo_2(tmp_path, monkeypatch)
    replaces = {"demo-pkg": {"version": "1.0", "host": "2.0", "why": WHY}}
    make_bundle(tmp_path, [_demo(tmp_path / "src", "1.0")], SIZE, name="engine-1.0", replaces_host=replaces)
    site = tmp_path / "site"
    if site_on_path:
        monkeypatch.syspath_prepend(str(site))
    assert hostside.install(sorted((tmp_path / "out").iterdir()), tmp_path / "stage", site) == 0
    assert f"demo-pkg 1.0 shadows this host's 2.0 on PYTHONPATH={site} alone: {WHY}" in capsys.readouterr().out
    imported = subprocess.run([sys.executable, "-c", "import demo_pkg; print(demo_pkg.VERSION)"], capture_output=True,
                              text=True, env={"PYTHONPATH": f"{site}:{host}"}, check=True)
    assert imported.stdout.strip() == "1.0"


def test_a_bundle_that_replaces_host_packages_gets_a_site_of_its_own(tmp_path, monkeypatch):
    _host_with_demo_2(tmp_path, monkeypatch)
    other = make_wheel(tmp_path / "other-src", "other", "3.0", {"other/__init__.py": b"x = 1\n"})
    make_bundle(tmp_path / "a", [other], SIZE, name="other-3.0")
    make_bundle(tmp_path / "b", [_demo(tmp_path / "src", "1.0")], SIZE, name="engine-1.0",
                replaces_host={"demo-pkg": {"version": "1.0", "host": "2.0", "why": WHY}})
    shared = tmp_path / "site"
    assert hostside.install(sorted((tmp_path / "a" / "out").iterdir()), tmp_path / "stage", shared) == 0
    with pytest.raises(hostside.Refused, match="cannot share a site"):
        hostside.install(sorted((tmp_path / "b" / "out").iterdir()), tmp_path / "stage", shared)
    own = tmp_path / "engine-site"
    assert hostside.install(sorted((tmp_path / "b" / "out").iterdir()), tmp_path / "stage", own) == 0
    with pytest.raises(hostside.Refused, match="cannot share a site"):  # nor the other way round
        hostside.install(sorted((tmp_path / "a" / "out").iterdir()), tmp_path / "stage", own)


def test_every_shipped_spec_and_host_profile_reads_strictly_under_its_file_name():
    """A bundle's id starts with its spec's name: the name `--spec` takes must be the one it gives."""
    names = sorted(path.stem for path in (spec.DATA / "bundles").glob("*.yaml"))
    assert "sglang-0.5.17" in names
    for name in names:
        assert spec.read_spec(name).name == name
    for path in (spec.DATA / "hosts").glob("*.yaml"):
        assert spec.read_profile(path.stem).name == path.stem
