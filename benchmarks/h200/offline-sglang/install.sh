#!/usr/bin/env bash
# Install the offline SGLang 0.5.17 parts on the H200 host (CPython 3.12, torch 2.11 from the image, no index).
#
#   bash install.sh PARTS_DIR [SITE]      SITE defaults to /tmp/sgl-site (not vLLM's /tmp/site: other transformers)
#   export PYTHONPATH=SITE                in front of every launch (or: . SITE/sgl-env.sh)
#
# PARTS_DIR holds any of sgl-part1/ .. sgl-part4/ (build.sh's OUTDIR, or what one transfer brought).
# Every part there is checked against its SHA256SUMS first (a damaged one: one line, exit 3, nothing
# installed), then extracted into SITE. A part already installed with the same SHA256SUMS is skipped, so
# run it again after each transfer: it installs what has arrived and names what is still missing.
# It ends by checking that python3, with PYTHONPATH=SITE, imports transformers 5.12.1 and tokenizers 0.22.2
# from SITE (SGLang 0.5.17's pin; the image's 5.17.0 breaks it, README.md): exit 4 if not.
# Only bash, tar, sha256sum and xz (or python3's lzma) are used to install; python3 for the checks.
set -euo pipefail
umask 022

die() { echo "install.sh: $*" >&2; exit "${RC:-1}"; }
say() { echo "install.sh: $*"; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then die "usage: install.sh PARTS_DIR [SITE]"; fi
P=$1
SITE=${2:-/tmp/sgl-site}
PY=${PYTHON:-python3}
PARTS=(sgl-part1 sgl-part2 sgl-part3 sgl-part4)
TRANSFORMERS_PIN=5.12.1
TOKENIZERS_PIN=0.22.2

[ -d "$P" ] || die "no folder $P"
P=$(cd "$P" && pwd)
only=
case ${P##*/} in   # given one part's own folder: install that part (from the folder above it)
  sgl-part[1-4]) only=${P##*/}; P=$(cd "$P/.." && pwd) ;;
esac
mkdir -p "$SITE"; SITE=$(cd "$SITE" && pwd)
[ ! -e "$SITE/vllm" ] || RC=2 die "$SITE holds a vllm install (offline-vllm's SITE?): use a folder of its own, e.g. /tmp/sgl-site"
STATE=$SITE/.offline-sglang

_unxz() {  # stdin -> stdout; Python's lzma where xz is absent
  if command -v xz >/dev/null 2>&1; then xz -dc; else
    "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 20)'
  fi
}
read_tops() {  # manifest -> TOPS: the part's top-level entries in SITE (checked: plain names only)
  local kind t
  TOPS=()
  while read -r kind t _; do
    [ "$kind" = top ] || continue
    [[ $t =~ ^[A-Za-z0-9_][A-Za-z0-9_.+-]*$ ]] || RC=3 die "bad entry '$t' in $1"
    TOPS+=("$t")
  done < "$1"
  [ "${#TOPS[@]}" -gt 0 ] || RC=3 die "$1 names no entries"
}

# ---- 1. which parts are here, and are they intact? (all checked before anything is extracted) ----
present=() bad=()
for p in "${PARTS[@]}"; do
  d=$P/$p
  [ -d "$d" ] || continue
  [ -z "$only" ] || [ "$p" = "$only" ] || continue
  present+=("$p")
  if [ ! -f "$d/SHA256SUMS" ] || ! grep -q "  $p.tar.xz\$" "$d/SHA256SUMS" || ! grep -q "  $p.manifest\$" "$d/SHA256SUMS"; then
    bad+=("$p (SHA256SUMS missing or incomplete)"); continue
  fi
  if ! out=$(cd "$d" && sha256sum --strict -c SHA256SUMS 2>&1); then
    why=$(printf '%s\n' "$out" | sed -n -e 's/^\(.*\): FAILED open or read$/\1 missing/p' \
      -e 's/^\(.*\): FAILED$/\1 changed/p' | paste -sd, -)
    bad+=("$p (${why:-SHA256SUMS unreadable})")
  fi
done
if [ "${#bad[@]}" -gt 0 ]; then
  names=$(printf '%s\n' "${bad[@]}" | sed 's/ (.*//' | paste -sd' ' -)
  RC=3 die "DAMAGED: $(printf '%s; ' "${bad[@]}" | sed 's/; $//'): nothing installed. Send ${names// /\/, }/ again (from build.sh's OUTDIR; a rebuild gives the same bytes) and rerun install.sh"
fi
[ "${#present[@]}" -gt 0 ] || RC=2 die "no sgl-part1/ .. sgl-part4/ in $P (give the folder that holds them)"

# ---- 2. extract each intact part that is not installed yet ----
t0=$(date +%s)
mkdir -p "$STATE"
for p in "${present[@]}"; do
  d=$P/$p
  if cmp -s "$d/SHA256SUMS" "$STATE/$p.SHA256SUMS" && [ -f "$STATE/$p.manifest" ]; then
    read_tops "$STATE/$p.manifest"
    missing=0
    for t in "${TOPS[@]}"; do [ -e "$SITE/$t" ] || missing=1; done
    if [ "$missing" = 0 ]; then say "$p: already installed (same SHA256SUMS), skipped"; continue; fi
  fi
  tp=$(date +%s)
  # this part owns its top-level entries: drop them (and those of an earlier build of it) first
  rm -f "$STATE/$p.SHA256SUMS"
  read_tops "$d/$p.manifest"; drop=("${TOPS[@]}")
  if [ -f "$STATE/$p.manifest" ]; then read_tops "$STATE/$p.manifest"; drop+=("${TOPS[@]}"); fi
  for t in "${drop[@]}"; do rm -rf "${SITE:?}/$t"; done
  _unxz < "$d/$p.tar.xz" | tar -x -C "$SITE" --no-same-owner
  cp "$d/$p.manifest" "$STATE/$p.manifest"
  cp "$d/SHA256SUMS" "$STATE/$p.SHA256SUMS"
  wheels=$(sed -n 's/^wheel \([^ ]*\) .*/\1/p' "$d/$p.manifest")
  say "$p: installed $(wc -l <<< "$wheels") wheels in $(( $(date +%s) - tp )) s: $(head -n 3 <<< "$wheels" | paste -sd' ' -)$([ "$(wc -l <<< "$wheels")" -le 3 ] || echo ' ...')"
done

installed=() absent=()
for p in "${PARTS[@]}"; do
  if [ -f "$STATE/$p.SHA256SUMS" ]; then installed+=("$p"); else absent+=("$p"); fi
done
cat > "$SITE/sgl-env.sh" <<EOF
# Written by offline-sglang/install.sh: source it in front of a launch of SGLang 0.5.17 from this SITE.
export PYTHONPATH=$SITE
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
EOF
say "extracted in $(( $(date +%s) - t0 )) s into $SITE; installed: ${installed[*]:-none}; still missing: ${absent[*]:-none}"

# ---- 3. what python3 will import from SITE: transformers/tokenizers must be the pinned ones ----
command -v "$PY" >/dev/null 2>&1 || RC=4 die "no $PY to check the install with (set PYTHON=...)"
part4=0; [ -f "$STATE/sgl-part4.SHA256SUMS" ] && part4=1
PYTHONPATH=$SITE "$PY" - "$SITE" "$part4" "$TRANSFORMERS_PIN" "$TOKENIZERS_PIN" <<'EOF' || exit $?
import importlib.metadata as md
import importlib.util
import os
import sys

site, part4, pins = sys.argv[1], sys.argv[2] == "1", {"transformers": sys.argv[3], "tokenizers": sys.argv[4]}
say = lambda s: print("install.sh: " + s, flush=True)
if sys.version_info[:2] != (3, 12):
    say(f"WARNING: {sys.executable} is Python {sys.version.split()[0]}: the parts' compiled modules are for CPython 3.12")


def where(name):
    spec = importlib.util.find_spec(name)
    origin = spec.origin if spec and spec.origin else None
    try:
        version = md.version(name)  # the first dist-info on sys.path, PYTHONPATH first
    except md.PackageNotFoundError:
        version = None
    inside = bool(origin) and os.path.realpath(origin).startswith(os.path.realpath(site) + os.sep)
    return origin, version, inside


if not part4:
    now = {n: where(n) for n in pins}
    say("sgl-part4 (transformers {transformers} + tokenizers {tokenizers}) is not installed yet: python3 would now import ".format(**pins)
        + ", ".join(f"{n} {v} from {o}" for n, (o, v, _) in now.items())
        + "; SGLang 0.5.17 needs the pinned ones (the image's transformers 5.17 already has 'qwen3_asr'): install sgl-part4 before launching")
    sys.exit(0)
for name, want in pins.items():
    origin, version, inside = where(name)
    if not inside:
        say(f"ERROR: python3 with PYTHONPATH={site} would import {name} from {origin}, not the pinned {want} from {site}: "
            "rerun install.sh with sgl-part4/ present")
        sys.exit(4)
    if version != want:
        say(f"ERROR: the {name} that python3 finds first is {version}, not the pinned {want}: rerun install.sh with sgl-part4/ present")
        sys.exit(4)
try:
    import tokenizers
    import transformers
    from transformers import AutoConfig, PretrainedConfig

    class _Probe(PretrainedConfig):
        model_type = "qwen3_asr"

    AutoConfig.register("qwen3_asr", _Probe)  # what sglang/srt/configs/qwen3_asr.py:167 does at import
except Exception as e:  # noqa: BLE001 - any failure here means SGLang will not import either
    say(f"ERROR: importing transformers/tokenizers from {site} failed: {type(e).__name__}: {e}")
    sys.exit(4)
for mod, want in ((transformers, pins["transformers"]), (tokenizers, pins["tokenizers"])):
    if mod.__version__ != want or not os.path.realpath(mod.__file__).startswith(os.path.realpath(site) + os.sep):
        say(f"ERROR: imported {mod.__name__} {mod.__version__} from {mod.__file__}, not the pinned {want} from {site}")
        sys.exit(4)
say(f"transformers {transformers.__version__} and tokenizers {tokenizers.__version__} import from {site} (the pinned ones, "
    "shadowing the image's); AutoConfig.register('qwen3_asr') works, as SGLang 0.5.17 needs")

# requirements of what SITE holds, against what python3 now sees (a report, never a failure)
try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name as cn
except ImportError:
    say("(packaging not importable: requirement report skipped)")
    sys.exit(0)
# the 66 distributions of SGLang 0.5.17's closure that are neither on the image nor carried (README.md)
LEFT_OUT = set("""airportsdata anthropic blobfile cryptography cuda-python cuda-tile datasets diskcache docstring-parser
easydict filecheck flash-attn-4 grpcio-health-checking grpcio-reflection helion httpcore2 httpx2 humming-kernels
interegular kernels kernels-data lark llguidance mistral-common modelscope modelscope-hub multiprocess nccl4py
nest-asyncio nvidia-cuda-cccl nvidia-cuda-crt nvidia-cuda-nvcc nvidia-cuda-nvdisasm nvidia-cudnn-frontend
nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-core nvidia-cutlass-dsl-libs-cu12
nvidia-cutlass-dsl-libs-cu13 nvidia-mathdx nvidia-nvvm openai-harmony outlines outlines-core py-spy pycountry
pycryptodomex pydantic-extra-types pyelftools quack-kernels sgl-deep-gemm smg-grpc-proto smg-grpc-servicer tilelang
tokenspeed-mla tokenspeed-triton tomlkit torch-c-dlpack-ext torch-memory-saver torchao torchcodec truststore tzdata
watchfiles z3-solver zstandard""".split())
have = {}
for d in md.distributions():  # sys.path order: SITE first
    have.setdefault(cn(d.metadata["Name"]), d.version)
mine = sorted({cn(d.metadata["Name"]): d for d in md.distributions(path=[site])}.items())
unmet, by_design = [], []
for n, d in mine:
    for r in d.requires or []:
        try:
            r = Requirement(r)
        except Exception:  # noqa: BLE001
            continue
        if r.marker and not r.marker.evaluate({"extra": ""}):
            continue
        v = have.get(cn(r.name))
        if v is not None and r.specifier.contains(v, prereleases=True):
            continue
        what = f"{n} needs {r.name}{r.specifier}, " + (f"has {v}" if v else "none")
        (by_design if v is None and cn(r.name) in LEFT_OUT else unmet).append(what)
say(f"requirements of the {len(mine)} packages in SITE, against what python3 sees: "
    + ("all met" if not unmet else f"{len(unmet)} not met (look here first if something fails):\n  " + "\n  ".join(unmet)))
if by_design:
    say(f"{len(by_design)} more requirements are on packages left out on purpose (README.md, 'Left out'): "
        + ", ".join(sorted({w.split(' needs ')[1].split(',')[0] for w in by_design})))
EOF

if [ "${#absent[@]}" -gt 0 ]; then
  say "INCOMPLETE: send ${absent[*]} too, then rerun install.sh (the installed parts are skipped)"
else
  say "all 4 parts installed. In front of a launch: export PYTHONPATH=$SITE   (or: . $SITE/sgl-env.sh, which also sets NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)"
fi
