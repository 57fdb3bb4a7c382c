"""A bundle's spec (rig/data/bundles/NAME.yaml) and a host's profile (rig/data/hosts/NAME.yaml),
read strictly: each is one declaration of what travels and what is already there."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from rig.errors import Invalid, NotFound
from rig.strict_yaml import load_yaml_file
from rig.typed import Spec, first_problem

DATA = Path(__file__).resolve().parent.parent / "data"
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# PEP 503 normalised project names, and a pinned requirement `name==version`.
PROJECT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}")
PLATFORM = re.compile(r"x86_64-manylinux_2_(1[7-9]|[2-3][0-9])|aarch64-manylinux_2_(1[7-9]|[2-3][0-9])")
UTC_STAMP = re.compile(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z")
MAX_SPEC_BYTES = 256 << 10


def normalize(name: str) -> str:
    """PEP 503: a project's name compared case- and separator-blind."""
    return re.sub(r"[-_.]+", "-", name).lower()


class OptionalFiles(Spec):
    glob: str = Field(min_length=1, max_length=256)
    why: str = Field(min_length=1, max_length=300)


class BundleSpec(Spec):
    """What an offline bundle of an engine carries. Each left-out package or file says why: the
    host-side installer prints these reasons beside the requirements they leave unmet."""

    name: str
    requirements: list[str] = Field(min_length=1, max_length=32)
    exclude_newer: str | None = None
    overrides: dict[str, str] = Field(default_factory=dict, max_length=64)
    leave_out_packages: dict[str, str] = Field(default_factory=dict, max_length=256)
    # Packages carried even where the host provides them (name -> why): the engine needs its own
    # version, which the installed site puts ahead of the host's on the engine's path alone.
    replace_host: dict[str, str] = Field(default_factory=dict, max_length=32)
    leave_out_files: dict[str, str] = Field(default_factory=dict, max_length=256)
    optional_files: dict[str, OptionalFiles] = Field(default_factory=dict, max_length=32)
    # Shared libraries whose GPU code is pruned to the host's architecture (rig/hosts/fatbin.py)
    # when the host profile names one.
    prune_gpu_code: list[str] = Field(default_factory=list, max_length=64)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a name (lower-case letters, digits, '.', '_', '-')")
        return value

    @field_validator("requirements")
    @classmethod
    def _pinned(cls, value: list[str]) -> list[str]:
        for requirement in value:
            if not PIN.fullmatch(requirement):
                raise ValueError(f"{requirement!r} is not pinned as name==version (a bundle travels one exact build)")
        return value

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, value: dict[str, str]) -> dict[str, str]:
        for requirement in value:
            if not PIN.fullmatch(requirement):
                raise ValueError(f"override {requirement!r} is not name==version")
        return value

    @field_validator("leave_out_packages", "replace_host")
    @classmethod
    def _packages(cls, value: dict[str, str]) -> dict[str, str]:
        for name, why in value.items():
            if not PROJECT.fullmatch(name):
                raise ValueError(f"{name!r} is not a package name")
            if not why.strip():
                raise ValueError(f"{name!r} gives no reason (say why, the installer prints it)")
        return value

    @field_validator("replace_host")
    @classmethod
    def _carried_or_left_out(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        left_out = {normalize(name) for name in info.data.get("leave_out_packages", {})}
        both = sorted(name for name in value if normalize(name) in left_out)
        if both:
            raise ValueError(f"{both[0]!r} is also in leave_out_packages (a package is carried or left out, not both)")
        return value

    @field_validator("exclude_newer")
    @classmethod
    def _stamp(cls, value: str | None) -> str | None:
        if value is not None and not UTC_STAMP.fullmatch(value):
            raise ValueError(f"{value!r} is not a UTC time as YYYY-MM-DDTHH:MM:SSZ")
        return value


class HostProfile(Spec):
    """What a host already has: its Python, its platform tag and its installed distributions (a
    version of None: assumed to satisfy what asks for it; the installer checks on the host)."""

    name: str
    python: str
    platform: str
    provides: dict[str, str | None] = Field(max_length=4096)
    gpu_arch: str | None = None  # sm_90: GPU code for other architectures may be pruned

    @field_validator("gpu_arch")
    @classmethod
    def _arch(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"sm_[1-9][0-9]{1,2}", value):
            raise ValueError(f"{value!r} is not a GPU architecture as sm_NN (sm_90 for H100/H200)")
        return value

    def arch_number(self) -> int | None:
        return int(self.gpu_arch[3:]) if self.gpu_arch else None

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        if not re.fullmatch(r"3\.1[0-9]", value):
            raise ValueError(f"{value!r} is not a Python version as 3.N (3.10 or later)")
        return value

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str) -> str:
        if not PLATFORM.fullmatch(value):
            raise ValueError(f"{value!r} is not a platform as x86_64-manylinux_2_N or aarch64-manylinux_2_N")
        return value

    @field_validator("provides")
    @classmethod
    def _provides(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for name, version in value.items():
            if not PROJECT.fullmatch(name) or (version is not None and not VERSION.fullmatch(version)):
                raise ValueError(f"{name!r}: {version!r} is not a package name and version")
        return {normalize(name): version for name, version in value.items()}

    def torch_pin(self) -> str | None:
        version = self.provides.get("torch")
        return f"torch=={version.split('+')[0]}" if version else None


def _read(kind: str, name_or_path: str, model: type[Spec], folder: str) -> Spec:
    path = Path(name_or_path)
    if "/" not in name_or_path and path.suffix not in (".yaml", ".yml", ".json"):
        if not NAME.fullmatch(name_or_path):
            raise Invalid(f"--{kind}", name_or_path, "not a name or a .yaml/.json path", f"name one of rig/data/{folder}/")
        path = DATA / folder / f"{name_or_path}.yaml"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in (DATA / folder).glob("*.yaml")))
            raise NotFound(f"--{kind}", name_or_path, "no such " + kind, f"name one of: {known}, or give a file's path")
    data = load_yaml_file(path, MAX_SPEC_BYTES)
    try:
        return model.model_validate(data)
    except ValidationError as error:
        field, problem = first_problem(error)
        raise Invalid(str(path), field, problem, f"correct {field} in {path.name}") from None


def read_spec(name_or_path: str) -> BundleSpec:
    spec = _read("spec", name_or_path, BundleSpec, "bundles")
    assert isinstance(spec, BundleSpec)
    return spec


def read_profile(name_or_path: str) -> HostProfile:
    profile = _read("host-profile", name_or_path, HostProfile, "hosts")
    assert isinstance(profile, HostProfile)
    return profile
