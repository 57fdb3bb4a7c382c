#!/usr/bin/env bash
# Build the offline SGLang 0.5.17 parts for the lent H200 host (CPython 3.12, x86_64, no package index).
#
#   bash build.sh OUTDIR              -> OUTDIR/sgl-part{1,2,3,4}/, each <= 48 MiB, each with its SHA256SUMS
#   bash build.sh --refresh OUTDIR    the same, but empties the download cache OUTDIR/.cache first
#   bash build.sh --relock OUTDIR     downloads every NAME==VERSION of sglang.lock afresh and rewrites
#                                     the lock's hashes and file names (done once; see README.md)
#
# Wheels: pip download --no-deps --only-binary=:all: for cp312 / manylinux_2_39..2_17 x86_64, into
# OUTDIR/.cache/wheels (kept: a rebuild downloads only what is missing). Every file is checked against
# sglang.lock's sha256 before use; a mismatch is refused in one line. Each part is the wheels unpacked
# as they are, minus the three pieces README.md lists (and only those: every other file is checked
# against its wheel's RECORD), as one deterministic tar.xz: same inputs, same bytes, whatever the thread
# count (xz in multi-threaded mode with a fixed block size, --no-adjust). Needs python3 + pip, unzip,
# GNU tar >= 1.28, xz >= 5.4, sha256sum. About 3 min on 2 cores plus a 475 MiB download.
# Environment: PYTHON (default python3), XZ_THREADS (default 0 = one per core; output does not depend on it).
set -euo pipefail
umask 022
export LC_ALL=C TZ=UTC

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCK=$HERE/sglang.lock
PY=${PYTHON:-python3}
LIMIT_MIB=48
PARTS=(sgl-part1 sgl-part2 sgl-part3 sgl-part4)
# The pieces left out (README.md, "Left out"; benchmarks/sglang-feasibility.md section 4). Each must be
# found, so a changed wheel is noticed. PART|PATH (a file, or a folder ending in /).
SLIM=(
  "sgl-part2|sgl_kernel/flash_ops.abi3.so"   # FA3: only sgl_kernel/flash_attn.py imports it; sglang does so lazily
  "sgl-part2|sgl_kernel/sm100/"              # sm_100 build; load_utils.py picks sm90/ at compute capability 9.0
  "sgl-part3|xgrammar/lib/libxgrammar.a"     # static archive for C++ linking; no Python file loads it
)

die() { echo "build.sh: $*" >&2; exit "${RC:-1}"; }
usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

mode=build refresh=0 OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --relock) mode=relock ;;
    --refresh) refresh=1 ;;
    -h|--help) usage 0 ;;
    -*) echo "build.sh: unknown option $1" >&2; usage 2 ;;
    *) [ -z "$OUT" ] || usage 2; OUT=$1 ;;
  esac
  shift
done
[ -n "$OUT" ] || usage 2
for t in unzip tar xz sha256sum; do command -v "$t" >/dev/null || die "needs $t"; done
tar --sort=name -cf /dev/null --files-from=/dev/null 2>/dev/null || die "needs GNU tar >= 1.28 (--sort=name)"
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
CACHE=$OUT/.cache/wheels
PIPLOG=$OUT/.cache/pip.log
STAGE=$OUT/.stage
mkdir -p "$CACHE"

PLAT=()
for i in $(seq 39 -1 17); do PLAT+=(--platform "manylinux_2_${i}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64)

# lock lines -> "SPEC SHA PART FILE" (FILE/SHA are "-" in a lock not yet written by --relock)
lock_rows() {
  awk '!/^[ \t]*(#|$)/ {
    spec=$1; sha="-"; part="-"; file="-"
    for (i = 2; i <= NF; i++) {
      if ($i ~ /^--hash=sha256:/) { sha = substr($i, 15) }
      else if ($i == "#") { part = $(i+1); if (i+2 <= NF) file = $(i+2); break }
    }
    print spec, sha, part, file
  }' "$LOCK"
}

pip_download() {  # DEST REQFILE
  echo "== pip download $(wc -l < "$2") wheels $(date -u +%FT%TZ)" >> "$PIPLOG"
  if ! nice -n 10 "$PY" -m pip download -q --no-deps --no-cache-dir --only-binary=:all: \
      --python-version 3.12 --implementation cp --abi cp312 "${PLAT[@]}" \
      --disable-pip-version-check -d "$1" -r "$2" >> "$PIPLOG" 2>&1; then
    die "pip download failed (last line: $(grep -v 'is ignored: it is neither' "$PIPLOG" | tail -n 1)); full log: $PIPLOG"
  fi
}

t0=$(date +%s)
if [ "$mode" = relock ]; then
  # Download every NAME==VERSION afresh, then rewrite the lock's hash and file name on each line.
  fresh=$OUT/.cache/relock
  rm -rf "$fresh"; mkdir -p "$fresh"
  lock_rows | awk '{print $1}' > "$OUT/.cache/relock.req"
  pip_download "$fresh" "$OUT/.cache/relock.req"
  "$PY" - "$LOCK" "$fresh" <<'EOF'
import hashlib, os, re, sys
lock, fresh = sys.argv[1:3]
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
files = {}
for f in os.listdir(fresh):
    name, version = f.split("-")[:2]
    files.setdefault((norm(name), version), []).append(f)
out, n = [], 0
for line in open(lock):
    if not line.strip() or line.lstrip().startswith("#"):
        out.append(line); continue
    spec, part = line.split()[0], line.split("#")[1].split()[0]
    name, version = spec.split("==")
    got = files.pop((norm(name), version), [])
    if len(got) != 1:
        sys.exit(f"build.sh: --relock: {spec} gave {got or 'no file'}")
    sha = hashlib.sha256(open(os.path.join(fresh, got[0]), "rb").read()).hexdigest()
    out.append(f"{spec} --hash=sha256:{sha}  # {part} {got[0]}\n"); n += 1
if files:
    sys.exit(f"build.sh: --relock: unexpected downloads {sorted(files.values())}")
open(lock + ".new", "w").writelines(out)
os.replace(lock + ".new", lock)
print(f"build.sh: {lock} rewritten: {n} wheels")
EOF
  rm -rf "$CACHE"; mv "$fresh" "$CACHE"
  echo "build.sh: relock done in $(( $(date +%s) - t0 )) s; the cache holds the new downloads. Now: bash build.sh $OUT"
  exit 0
fi

# ---- 1. download what the cache lacks, then check every file against the lock ----
mapfile -t ROWS < <(lock_rows)
[ "${#ROWS[@]}" -gt 0 ] || die "no wheels in $LOCK"
if [ "$refresh" = 1 ]; then rm -rf "$CACHE"; mkdir -p "$CACHE"; echo "build.sh: --refresh: download cache emptied"; fi
need=$OUT/.cache/need.req; : > "$need"
for r in "${ROWS[@]}"; do
  read -r spec sha part file <<< "$r"
  if [ "$sha" = - ] || [ "$file" = - ]; then die "$LOCK has no hash for $spec: run build.sh --relock first"; fi
  [ -f "$CACHE/$file" ] || echo "$spec" >> "$need"
done
if [ -s "$need" ]; then
  echo "build.sh: downloading $(wc -l < "$need") of ${#ROWS[@]} wheels into $CACHE"
  pip_download "$CACHE" "$need"
else
  echo "build.sh: all ${#ROWS[@]} wheels already in $CACHE (use --refresh to download again)"
fi
for r in "${ROWS[@]}"; do
  read -r spec sha part file <<< "$r"
  [ -f "$CACHE/$file" ] || RC=2 die "REFUSED: pip gave no $file for $spec (the index offers other files: see $PIPLOG; sglang.lock pins this one)"
  got=$(sha256sum "$CACHE/$file" | cut -d' ' -f1)
  [ "$got" = "$sha" ] || RC=2 die "REFUSED: $file has sha256 $got, sglang.lock pins $sha (delete $CACHE/$file to download it again, or rerun --relock if the change is wanted)"
done
echo "build.sh: ${#ROWS[@]} wheels match sglang.lock ($(du -sm --apparent-size "$CACHE" | cut -f1) MiB) [$(( $(date +%s) - t0 )) s]"

# no two wheels may write the same file (parts are extracted into one SITE in any order)
dups=$(for r in "${ROWS[@]}"; do read -r _ _ _ file <<< "$r"; unzip -Z1 "$CACHE/$file"; done | grep -v '/$' | sort | uniq -d | head -n 3)
[ -z "$dups" ] || die "two wheels ship the same file: $dups"

# ---- 2. one part at a time: unpack, slim, check against RECORD, tar | xz, SHA256SUMS ----
for p in "${PARTS[@]}"; do rm -rf "${OUT:?}/$p"; done
rm -rf "$STAGE"
if [ "${XZ_THREADS:-0}" = 1 ]; then XZT=+1; else XZT=${XZ_THREADS:-0}; fi   # -T1 would be single-threaded mode: other bytes
for p in "${PARTS[@]}"; do
  tp=$(date +%s)
  st=$STAGE/$p; dest=$OUT/$p
  mkdir -p "$st" "$dest"
  man=$dest/$p.manifest
  {
    echo "# $p of the offline SGLang 0.5.17 (benchmarks/h200/offline-sglang/build.sh, sglang.lock)."
    echo "# Extract into SITE: xz -dc $p.tar.xz | tar -x -C SITE   (install.sh does this and more)"
  } > "$man"
  n=0
  for r in "${ROWS[@]}"; do
    read -r spec sha part file <<< "$r"
    [ "$part" = "$p" ] || continue
    unzip -q -o "$CACHE/$file" -d "$st"
    echo "wheel $spec $file sha256:$sha" >> "$man"
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || die "no wheels for $p in $LOCK"
  removed=()
  for s in "${SLIM[@]}"; do
    [ "${s%%|*}" = "$p" ] || continue
    path=${s#*|}
    [ -e "$st/${path%/}" ] || die "$p: $path is not in the wheel any more: check the slimming list (README.md)"
    echo "removed $path $(du -sb --apparent-size "$st/${path%/}" | cut -f1) bytes" >> "$man"
    rm -rf "${st:?}/${path%/}"
    removed+=("$path")
    parent=$(dirname "$st/${path%/}")   # a folder the removal leaves empty goes too (xgrammar/lib/)
    if [ -z "$(ls -A "$parent")" ]; then rmdir "$parent"; fi
  done
  # fixed modes: folders 0755, files 0755 where the wheel marks them executable, else 0644
  find "$st" -type d -exec chmod 0755 {} +
  find "$st" -type f -perm /111 -exec chmod 0755 {} +
  find "$st" -type f ! -perm /111 -exec chmod 0644 {} +
  [ -z "$(find "$st" ! -type f ! -type d)" ] || die "$p: wheels unpacked to something other than files and folders"
  # every file is its wheel's, unchanged, and only the listed pieces are missing
  "$PY" - "$st" "${removed[@]}" <<'EOF' || die "$p: the unpacked tree does not match the wheels' RECORD"
import base64, csv, glob, hashlib, os, sys
st, removed = sys.argv[1], sys.argv[2:]
gone = lambda p: any(p == r or (r.endswith("/") and p.startswith(r)) for r in removed)
listed, bad, n_removed = set(), [], 0
for rec in sorted(glob.glob(os.path.join(st, "*.dist-info", "RECORD"))):
    for row in csv.reader(open(rec, newline="")):
        if not row:
            continue
        path, h = row[0], row[1] if len(row) > 1 else ""
        listed.add(path)
        fp = os.path.join(st, path)
        if gone(path):
            n_removed += 1
            if os.path.exists(fp):
                bad.append("not removed: " + path)
        elif not os.path.isfile(fp):
            bad.append("missing: " + path)
        elif h:
            algo, _, want = h.partition("=")
            d = hashlib.new(algo, open(fp, "rb").read()).digest()
            if base64.urlsafe_b64encode(d).rstrip(b"=").decode() != want:
                bad.append("changed: " + path)
for dirpath, _, names in os.walk(st):
    for name in names:
        rel = os.path.relpath(os.path.join(dirpath, name), st)
        if rel not in listed:
            bad.append("not in any RECORD: " + rel)
if n_removed == 0 and removed:
    bad.append("the removed pieces are in no RECORD")
for b in bad[:10]:
    print("  " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
  mapfile -t tops < <(find "$st" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)
  for t in "${tops[@]}"; do echo "top $t" >> "$man"; done
  echo "unpacked $(find "$st" -type f | wc -l) files $(du -sb --apparent-size "$st" | cut -f1) bytes" >> "$man"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
      --no-acls --no-xattrs -C "$st" -cf - "${tops[@]}" \
    | nice -n 10 xz -6 --threads="$XZT" --block-size=24MiB --check=crc64 --no-adjust -c > "$dest/$p.tar.xz"
  (cd "$dest" && sha256sum "$p.manifest" "$p.tar.xz" > SHA256SUMS)
  bytes=$(cat "$dest"/* | wc -c)
  echo "build.sh: $p: $n wheels, $(awk -v b="$bytes" 'BEGIN{printf "%.2f", b/1048576}') MiB [$(( $(date +%s) - tp )) s]"
  [ "$bytes" -le $((LIMIT_MIB * 1048576)) ] || die "$p is $bytes bytes, over $LIMIT_MIB MiB: split it"
  rm -rf "$st"
done
rm -rf "$STAGE"

echo "build.sh: done in $(( $(date +%s) - t0 )) s ($(tar --version | head -n 1), $(xz --version | head -n 1)). Parts:"
for p in "${PARTS[@]}"; do
  printf '  %-10s %8d bytes  %s\n' "$p" "$(cat "$OUT/$p"/* | wc -c)" "$(sha256sum "$OUT/$p/$p.tar.xz" | cut -d' ' -f1)"
done
