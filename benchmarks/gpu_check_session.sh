#!/usr/bin/env bash
# The third lease of a GPU (docs/results.md, "On one GPU"), in one command, for what the first two
# left unmeasured:
#
#   1. the whole test suite on the GPU machine (device "auto" means CUDA there), every outcome named
#      as it comes and each test stopped after --timeout seconds, so that the run ends with its
#      summary of failures and their reasons;
#   2. beside it, the Transformer GPU recipe trained for its full 6 minutes, then scored on
#      validation and once on the test set with the length penalty validation chose before;
#   3. after the suite: host reads per beam-search step (gpu.py decode --count-syncs) on two runs
#      trained on a CPU and carried in .gpudata/ckpt, and torch.compile of the Transformer on the GPU.
#
#   OUT=/tmp/gpu-out bash benchmarks/gpu_check_session.sh        # carry .gpudata
#   SMOKE=1 OUT=/tmp/gpu-smoke ATTNMT_DATA_DIR=../shared/data bash benchmarks/gpu_check_session.sh  # CPU check
#
# .gpudata holds multi30k/ (the data) and ckpt/rnn, ckpt/transformer (best.pt, config, tokenizer).
. "$(dirname "$0")/gpu_lease_preamble.sh"
RUNS=${RUNS:-runs/gpu3}
if [ -e "$RUNS" ]; then  # never replace a user's runs: a fresh lease's tree has none
    stage "$RUNS exists: move it away; nothing is run"; exit 1
fi

if [ "${SMOKE:-0}" = 1 ]; then  # every step on a CPU in a few minutes, never looking at the test set
    MINUTES=0.1; TEST=valid
    device=(--set training.device=cpu --set training.precision=fp32 --set search.max_len_a=0 --set search.max_len_b=3)
    decode_device=(--device cpu)
    SUITE=(tests/test_cuda.py tests/test_search.py); COMPILE=(--device cpu --steps 2 --models rnn)
else
    MINUTES=6; TEST=test_2016_flickr
    device=(); decode_device=()
    SUITE=(-n 10 -v -rfEs --tb=short --timeout 120 tests)  # -rs: why each skip
    COMPILE=(--device cuda --precision bf16 --max-tokens 4096 --steps 100 --models transformer)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
fi

stage "install"
$PYTHON -m pip install -q --no-deps --no-build-isolation -e . || export PYTHONPATH=$PWD
$PYTHON -c "import attnmt, torch; print('attnmt', attnmt.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
mkdir -p "$RUNS"

stage "the Transformer recipe for $MINUTES minutes, beside the suite"
(
    timeout 450 $PYTHON -m attnmt train --config configs/multi30k_transformer_gpu.yaml --out "$RUNS/transformer" \
        --no-progress --max-minutes $MINUTES "${device[@]}" > "$RUNS/train.log" 2>&1
    echo "train exit $?"; tail -n 3 "$RUNS/train.log"
    timeout 60 $PYTHON benchmarks/length_penalty.py "$RUNS/transformer" --split valid --alphas 1.2 \
        --json "$OUT/transformer-valid.json" | tail -n 4
    timeout 60 $PYTHON benchmarks/length_penalty.py "$RUNS/transformer" --split $TEST --alphas 1.2 \
        --json "$OUT/transformer-$TEST.json" | tail -n 4
    stage "the Transformer is scored"
) &
training=$!

stage "the whole suite"
timeout 330 $PYTHON -m pytest -p no:cacheprovider "${SUITE[@]}" > "$OUT/suite.log" 2>&1
echo "suite exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/suite.log" | tail -n 60

stage "host reads per search step, on runs trained on a CPU"
timeout 90 $PYTHON benchmarks/gpu.py decode .gpudata/ckpt/rnn .gpudata/ckpt/transformer --split $TEST \
    --batch-sizes 1000 --repeats 3 --count-syncs "${decode_device[@]}" --json "$OUT/gpu_decode.json"
echo "decode exit $?"

stage "torch.compile of the Transformer (beside the training, if it still runs)"
timeout 150 $PYTHON benchmarks/compile.py "${COMPILE[@]}" --output "$OUT/compile.json" > "$OUT/compile.log" 2>&1
echo "compile exit $?"; tail -n 6 "$OUT/compile.log"

wait $training
cp "$RUNS/train.log" "$OUT/train.log"
cp "$RUNS/transformer/metrics.jsonl" "$OUT/metrics.jsonl" 2>/dev/null
stage "done"
