#!/usr/bin/env bash
# First contact of rig with real vLLM on the lent H200s: every step runs even when one before it
# failed, and says so; results and logs are packed into $OUT.
source benchmarks/h200/env.sh || exit 3
export RIG_RESULTS_DIR=/tmp/rig-results
step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; [ $rc -eq 0 ] || echo "!!! FAILED ($rc): $*"; }
which python3; ls -la /opt/torch/.venv/bin/python3
step nvidia-smi --query-gpu=index,name,memory.used,power.limit,driver_version --format=csv
step python3 -c "import vllm, locust, pydantic, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
step rig validate llama-h200
step rig up llama-h200
step rig status
step rig chat llama-h200 "Hello there" --max-tokens 32
url=http://127.0.0.1:8341
step curl -s -o /dev/null -w "reset_prefix_cache: %{http_code}\n" -X POST $url/reset_prefix_cache
curl -s $url/metrics > /tmp/metrics.txt; grep -c '^vllm:' /tmp/metrics.txt; grep -oE '^vllm:[a-z_]+' /tmp/metrics.txt | sort -u | tr '\n' ' '; echo
model=$(curl -s $url/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
curl -s $url/v1/completions -H 'Content-Type: application/json' -d "{\"model\": \"$model\", \"prompt\": \"The quick brown fox\", \"max_tokens\": 1, \"prompt_logprobs\": 3, \"logprobs\": 3, \"temperature\": 0}" > /tmp/prompt_logprobs.json; head -c 1500 /tmp/prompt_logprobs.json; echo
step rig loadtest llama-h200 --scenario prose-c1 --scenario decode-ctx3k --scenario prefill-8k --duration 10
step rig down llama-h200
step nvidia-smi --query-compute-apps=pid,used_memory --format=csv
RIG_API_KEY=sk-smoke-planted step rig up llama-h200:delay
grep -h "token_delay\|rig_adapters" $RIG_RESULTS_DIR/boots/*delay*/server.log | head -12
curl -s -o /dev/null -w "unauthenticated /v1/models: %{http_code}\n" http://127.0.0.1:8341/v1/models
RIG_API_KEY=sk-smoke-planted step rig loadtest llama-h200 --scenario prose-c1 --duration 10
step rig down llama-h200
step nvidia-smi --query-compute-apps=pid,used_memory --format=csv
ps -eo pid,pgid,args | grep -c "[v]llm" 
leaks=$(grep -rl "sk-smoke-planted" $RIG_RESULTS_DIR /tmp/metrics.txt ~/.cache/vllm /tmp/torchinductor_* /dev/shm 2>/dev/null)
[ -z "$leaks" ] && echo "planted key: in no file" || echo "!!! planted key found in: $leaks"
cp /tmp/prompt_logprobs.json /tmp/metrics.txt $RIG_RESULTS_DIR/ 2>/dev/null
tar -C /tmp -czf $OUT/results.tgz rig-results
ls -la $OUT
