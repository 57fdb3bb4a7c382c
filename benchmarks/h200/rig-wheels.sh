#!/usr/bin/env bash
# Run here (with package-index access), before a GPU session: downloads the wheels rig itself needs on
# the lent H200 hosts that neither their image nor the offline-vllm parts provide, pinned by sha256,
# into .gpu/parts/rig-wheels (git-ignored; carry it like a part). env.sh installs them.
set -euo pipefail
DEST=.gpu/parts/rig-wheels
mkdir -p "$DEST"
# google-re2: rig's boot-log patterns (rig/grammar.py); the hosts are Python 3.12, x86_64.
WHEEL=google_re2-1.1-3-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
SHA=586d3f2014eea5be14d8de53374d9b79fa99689160e00efa64b5fe93af326087
[ -f "$DEST/$WHEEL" ] || python3 -m pip download -q google-re2==1.1 --no-deps --only-binary=:all: \
  --python-version 3.12 --platform manylinux_2_17_x86_64 -d "$DEST"
echo "$SHA  $DEST/$WHEEL" | sha256sum --quiet --strict -c - || { echo "rig-wheels.sh: $WHEEL does not match its sha256" >&2; exit 3; }
echo "rig-wheels.sh: $(du -sh "$DEST" | cut -f1) in $DEST"
