"""The command line of `rig bundle build`, `rig pack` and `rig unpack`: rig.cli lists COMMANDS
beside its own."""

from __future__ import annotations

import argparse
from pathlib import Path

from rig import paths
from rig.cli_args import Command
from rig.exits import Exit

BUNDLE_EXAMPLES = ("rig bundle build .bundle --spec vllm-0.24.0 --host-profile h200-py312-torch211 --part-size 50MiB",
                   "rig bundle build .bundle --spec vllm-0.24.0 --host-profile host.json --with moe",
                   "python3 .bundle/part-01/install.py install .bundle/part-*   # on the host, as parts arrive")
PACK_EXAMPLES = ("rig pack --out /tmp/out/pack   # this host's RIG_RESULTS_DIR, in parts of 15MiB",
                 "rig unpack .packs/last         # on the next host, before rig compare --resume",
                 "rig pack --caches llama8b-h200 --out /tmp/out/caches   # the compile caches its boots use here",
                 "rig unpack .packs/caches       # merged into this host's caches: no recompiling")


def cmd_bundle_build(args: argparse.Namespace) -> int:
    from rig.hosts.bundle import build
    from rig.hosts.parts import part_size
    from rig.hosts.spec import read_profile, read_spec

    built = build(read_spec(args.spec), read_profile(args.host_profile), Path(args.out), part_size(args.part_size),
                  args.with_files, with_rig=not args.engine_only)
    manifest = built.manifest
    total = manifest["archive_bytes"] / (1 << 20)
    print(f"bundle {manifest['id']}: {len(manifest['parts'])} parts, {total:.1f} MiB in {built.out}/part-NN/")
    print(f"  {len(manifest['wheels'])} packages carried, {len(manifest['provided'])} left to the host, "
          f"{len(manifest['left_out_packages'])} left out (reasons in bundle.json)")
    for name, replaced in manifest["replaces_host"].items():
        print(f"  {name} {replaced['version']} carried, ahead of the host's {replaced['host'] or '(any version)'} "
              f"on the engine's path: {replaced['why']}")
    for row in manifest["wheels"]:
        if row["left_out_files"]:
            print(f"  {row['name']}: {len(row['left_out_files'])} files left out (bundle.json says which and why)")
    replaced = ", ".join(manifest["replaces_host"])
    site = f"SITE   # a site of its own, named by the recipe's native.pythonpath: it replaces the host's {replaced}" \
        if replaced else "/tmp/site"
    print(f"  on the host: python3 {built.out.name}/part-01/install.py install {built.out.name}/part-* --site {site}")
    return Exit.OK


def cmd_pack(args: argparse.Namespace) -> int:
    import os

    from rig.hosts.pack import pack, pack_caches
    from rig.hosts.parts import part_size

    if args.caches:
        manifest = pack_caches(args.caches, dict(os.environ), Path(args.out), part_size(args.part_size))
        mib = sum(part["bytes"] for part in manifest["parts"]) / (1 << 20)
        print(f"pack {manifest['id']}: {len(manifest['parts'])} parts, {mib:.1f} MiB in {args.out}/part-NN/ "
              f"(the compile caches of {args.caches}: {', '.join(manifest['caches'])})")
        return Exit.OK
    source = Path(args.source) if args.source else paths.results_dir()
    manifest = pack(source, Path(args.out), part_size(args.part_size))
    print(f"pack {manifest['id']}: {len(manifest['parts'])} parts in {args.out}/part-NN/ (from {source})")
    return Exit.OK


def cmd_unpack(args: argparse.Namespace) -> int:
    import os

    from rig.errors import Invalid
    from rig.hosts.pack import is_caches, unpack, unpack_caches

    if is_caches(Path(args.pack)):
        if args.into or args.replace:
            raise Invalid("command line", "--into" if args.into else "--replace", "a caches pack goes where the recipe's "
                          "boots compile on this host, and never replaces a file", "leave it out")
        manifest, added, kept = unpack_caches(Path(args.pack), dict(os.environ))
        print(f"unpacked {manifest['id']}: {added} cache files added for {manifest['recipe']}, {kept} this host held kept")
        return Exit.OK
    into = Path(args.into) if args.into else paths.results_dir()
    manifest = unpack(Path(args.pack), into, replace=args.replace)
    print(f"unpacked {manifest['id']} into {into}: rig compare --resume or rig tune --resume carries on from it")
    return Exit.OK


def _bundle_build_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("out", help="the folder to write (its part-NN/ folders each hold one part, the manifest and install.py)")
    b.add_argument("--spec", required=True, help="a bundle spec: a name in rig/data/bundles/ (e.g. vllm-0.24.0) or a file")
    b.add_argument("--host-profile", required=True,
                   help="what the host has: a name in rig/data/hosts/ or the JSON `install.py profile` printed there")
    b.add_argument("--part-size", default="60MiB", help="the largest part, e.g. 60MiB (default), 15MiB or 2GiB")
    b.add_argument("--with", dest="with_files", action="append", default=[], metavar="NAME",
                   help="carry one of the spec's optional file groups too (e.g. moe); repeatable")
    b.add_argument("--engine-only", action="store_true",
                   help="carry the spec's packages alone, not rig's own host dependencies (a host that runs rig elsewhere)")


def _pack_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="an empty or new folder for the part-NN/ folders")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--source", help="the directory to pack (default: RIG_RESULTS_DIR)")
    what.add_argument("--caches", metavar="RECIPE",
                      help="pack the compile caches RECIPE[:variant]'s boots use on this host instead of results")
    p.add_argument("--part-size", default="15MiB", help="the largest part, e.g. 15MiB (default)")


def _unpack_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pack", help="the folder `rig pack` wrote (holding part-NN/ folders); a caches pack merges "
                   "into where its recipe's boots compile on this host")
    p.add_argument("--into", help="where the results go (default: RIG_RESULTS_DIR)")
    p.add_argument("--replace", action="store_true", help="replace results already there (default: refuse)")


COMMANDS = [
    Command("bundle", None, "offline bundles of an engine and rig's host dependencies, for hosts with no package index",
            "Offline bundles: wheels pinned by sha256, in parts of a chosen size, with an installer that needs only "
            "Python and pip on the host (docs/gpu-hosts.md).",
            BUNDLE_EXAMPLES,
            subcommands=(
                Command("build", cmd_bundle_build, "resolve, download, prune and cut a bundle into parts",
                        "Resolve the spec's engine and rig's own requirements for the host's Python and platform (uv), "
                        "leave out what the host has and what the spec leaves out (each with its reason), prune GPU code "
                        "to the host's architecture, download the wheels pinned by sha256 and cut them into parts.",
                        BUNDLE_EXAMPLES, _bundle_build_arguments),
            )),
    Command("pack", cmd_pack, "a results directory in checked parts, to carry to the next host",
            "Pack a results directory (default: RIG_RESULTS_DIR) as an xz tar in parts of a chosen size, each with a "
            "sha256 manifest: what a step on a host that may vanish leaves behind. With --caches, the compile caches a "
            "recipe's boots use here, so that the next host of the same kind loads them instead of compiling.",
            PACK_EXAMPLES, _pack_arguments),
    Command("unpack", cmd_unpack, "put a pack's results directory in place, checked",
            "Check every part of a pack by sha256, join them and put the results directory in place in one rename "
            "(default: RIG_RESULTS_DIR); then rig compare --resume or rig tune --resume carries on from it. A caches "
            "pack is merged file by file into this host's caches, keeping every file the host already holds.",
            PACK_EXAMPLES, _unpack_arguments),
]
