# shellcheck shell=bash
# Source on a lent H200 host (repository root as the working directory) after the offline-vllm
# parts arrived in .gpu/parts (see benchmarks/h200/README.md): installs whatever parts are there
# into /tmp/site (idempotent, sha256-checked) and puts rig, its adapters and vLLM on PYTHONPATH.
# The lent hosts reach no package index: rig's own dependencies come from the image (numpy, scipy,
# matplotlib, torch, transformers, prometheus-client, nvidia-ml-py, psutil) and the parts
# (pydantic, msgspec from part1; locust, gevent and the Docker SDK from part-client; google-re2 from
# .gpu/parts/rig-wheels, which benchmarks/h200/rig-wheels.sh downloads here).
set -u
RIG_REPO=$(pwd)
export RIG_REPO
if [ -d .gpu/parts ] && [ -f .gpu/tools/install.sh ]; then bash .gpu/tools/install.sh .gpu/parts /tmp/site >/tmp/install.log 2>&1 || { cat /tmp/install.log; return 3; }; fi
if [ -d .gpu/parts/rig-wheels ]; then  # rig's own wheels the host lacks (benchmarks/h200/rig-wheels.sh)
  python3 -m pip install -q --no-index --no-deps --disable-pip-version-check --target /tmp/site --upgrade \
    .gpu/parts/rig-wheels/*.whl >>/tmp/install.log 2>&1 || { cat /tmp/install.log; return 3; }
fi
export PYTHONPATH=/tmp/site:$RIG_REPO:$RIG_REPO/adapter
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rig() { python3 -m rig "$@"; }
# Fail here, in one line, rather than minutes later inside a detached session.
python3 -c "import vllm, locust, re2, pydantic, rig.cli" 2>/tmp/import-check.log \
  || { echo "env.sh: rig or vLLM does not import: $(tail -1 /tmp/import-check.log) (missing part? see benchmarks/h200/README.md)"; return 3; }
