# Source on a lent H200 host (repository root as the working directory) after the offline-vllm
# parts arrived in .gpu/parts (see benchmarks/h200/README.md): installs whatever parts are there
# into /tmp/site (idempotent, sha256-checked) and puts rig, its adapters and vLLM on PYTHONPATH.
# The lent hosts reach no package index: rig's own dependencies come from the image (numpy, scipy,
# matplotlib, torch, transformers, prometheus-client, nvidia-ml-py, psutil) and the parts
# (pydantic from part1; locust, gevent and the Docker SDK from part-client).
set -u
export RIG_REPO=$(pwd)
if [ -d .gpu/parts ]; then bash .gpu/tools/install.sh .gpu/parts /tmp/site >/tmp/install.log 2>&1 || { cat /tmp/install.log; return 3; }; fi
export PYTHONPATH=/tmp/site:$RIG_REPO:$RIG_REPO/adapter
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rig() { python3 -m rig "$@"; }
