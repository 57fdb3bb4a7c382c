#!/usr/bin/env bash
# Run here (with package-index access), before a GPU sitting that measures client capacity beside
# AIPerf (issue 27): downloads AIPerf 0.13.0 and the wheels it needs that the H200 host image lacks,
# pinned by sha256 in benchmarks/h200/aiperf.lock (which says what is left out and why), into
# .gpu/parts/part-aiperf (git-ignored; carry it in the `capacity` call of resolution.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.gpu/parts/part-aiperf
mkdir -p "$DEST"
python3 -m pip download -q --disable-pip-version-check --require-hashes --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any \
  -r benchmarks/h200/aiperf.lock -d "$DEST" 2> >(grep -v "is ignored: it is neither" >&2)
wheels=$(find "$DEST" -name '*.whl' | wc -l)
want=$(grep -c '^[a-z0-9-]*==' benchmarks/h200/aiperf.lock)
[ "$wheels" -eq "$want" ] || { echo "aiperf-part.sh: $wheels wheels in $DEST, the lock names $want (a stale file there? remove $DEST and run again)" >&2; exit 3; }
echo "aiperf-part.sh: $wheels wheels, $(du -sh "$DEST" | cut -f1) in $DEST"
