#!/usr/bin/env bash
# The real-engine runs behind benchmarks/RESULTS.md ("Real engine"), on a lent 2 x H200 host, after
# the offline-vllm parts arrived in .gpu/parts (benchmarks/h200/README.md). Long: start it detached
#   setsid nohup bash benchmarks/h200/session.sh > /tmp/session.log 2>&1 < /dev/null &
# and read /tmp/session.log; everything lands under /tmp/rig-results (packed by pack.sh).
source benchmarks/h200/env.sh || exit 3
export RIG_RESULTS_DIR=/tmp/rig-results RIG_GPU_TEST_RESULTS=/tmp/rig-results/gpu-tests
mkdir -p $RIG_GPU_TEST_RESULTS
step() { echo "=== $(date +%T) $*"; "$@"; local rc=$?; echo "=== $(date +%T) exit $rc"; return $rc; }
# The comparison first (the device budget may end before the tests): token_delay off vs on (TP2) and
# an arm identical to the baseline; 2 ABBA pairs, keyed server (no request may answer 401). (The
# float16 quality arm, --arm fp16:@delay-fp16,RIG_TOKEN_DELAY_MS=0, adds two boots.) The delay is 100 ms: 2 pairs give a t interval with 1 degree of
# freedom (t = 12.7), and eager TP2's boot sd (~12%) then needs a ratio above ~3.5 to exclude zero;
# 20 ms (+150% per token) would not, 100 ms (+~1000%) does with margin (measured: +105.7 ms [+90.8, +120.7]).
RIG_API_KEY=sk-session-planted-77aa step python3 -m rig compare llama-h200 \
  --arm off:@delay,RIG_TOKEN_DELAY_MS=0 --arm on:@delay,RIG_TOKEN_DELAY_MS=100 \
  --arm same:@delay,RIG_TOKEN_DELAY_MS=0 \
  --boots 2 --rounds 2 --scenario prose-c1 --small --duration 8 2>&1
step python3 -m pytest -m gpu tests/gpu/test_engines_gpu.py -v -s -p no:cacheprovider -k "${RIG_GPU_TESTS:-llama}" 2>&1
# the key must be in no file: results, vLLM's compile cache (it writes VLLM_* variables there), shared memory
leaks=$(grep -rl "sk-session-planted-77aa" /tmp/rig-results ~/.cache/vllm /tmp/torchinductor_* /dev/shm 2>/dev/null)
[ -z "$leaks" ] && echo "planted key: in no file" || echo "!!! planted key found in: $leaks"
echo "SESSION DONE $(date +%T)"
