#!/usr/bin/env bash
# Everything one short lease of a GPU runs, in one command (the GPU figures of docs/results.md):
#
#   1. benchmarks/gpu.py speed: training tokens/s per precision and where a step's time goes,
#      alone on the GPU. It is also the gate: when it fails, the script stops at once, so that
#      the rest of the lease is left for a fixed rerun.
#   2. The two GPU recipes (configs/multi30k_{rnn,transformer}_gpu.yaml) trained and scored by
#      benchmarks/recipe.py side by side, with tests/test_cuda.py beside them. Each run shares the
#      GPU with the other two jobs, so its minutes hold fewer steps than they would alone.
#   3. benchmarks/gpu.py decode: beam-5 decoding time of the test set, alone on the GPU.
#
#   OUT=/tmp/gpu-out ATTNMT_DATA_DIR=../shared/data bash benchmarks/gpu_session.sh
#   SMOKE=1 OUT=/tmp/gpu-smoke ATTNMT_DATA_DIR=../shared/data bash benchmarks/gpu_session.sh   # on a CPU
#
# STAGES chooses among "speed recipes decode" (the default) and "tests" (tests/test_cuda.py alone,
# when the recipes do not run), e.g. STAGES="speed tests" for a rerun after a fix.
# Results land in $OUT; `python benchmarks/gpu.py report` puts them into benchmarks/results/gpu.json.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
. "$(dirname "$0")/gpu_lease_preamble.sh"
RUNS=${RUNS:-runs/gpu}
STAGES=" ${STAGES:-speed recipes decode} "
want() { [[ "$STAGES" == *" $1 "* ]]; }

if [ "${SMOKE:-0}" = 1 ]; then  # the same steps on a CPU in seconds: a check of this script
    device=(--device cpu); speed=(--configs configs/tiny.yaml --precisions fp32 bf16 --steps 2 --split-steps 1)
    train=(--set training.device=cpu --set training.max_minutes=0.05 --set training.max_epochs=1 --split valid)
    decode=(--batch-sizes 500 --repeats 1 --split valid)  # a smoke test never looks at the test set
else
    device=(); speed=(--steps 120 --split-steps 10); train=(--split test_2016_flickr); decode=(--batch-sizes 64 1000 --repeats 3)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
fi
stage "install"
$PYTHON -m pip install -q --no-deps --no-build-isolation -e . || export PYTHONPATH=$PWD
$PYTHON -c "import attnmt, torch; print('attnmt', attnmt.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"

if want tests; then
stage "tests/test_cuda.py (alone on the device)"
timeout 300 $PYTHON -m pytest -q -p no:cacheprovider -rA tests/test_cuda.py > "$OUT/test_cuda.log" 2>&1
echo "tests/test_cuda.py exit $?"; tail -n 15 "$OUT/test_cuda.log"
fi

if want speed; then
stage "speed (alone on the device)"
if ! timeout 240 $PYTHON benchmarks/gpu.py speed "${device[@]}" "${speed[@]}" --json "$OUT/gpu_speed.json"; then
    stage "speed failed: stopping here, so that the lease is left for a fixed rerun"
    exit 1
fi
fi

if want recipes; then
stage "the two recipes side by side, with tests/test_cuda.py"
if [ -e "$RUNS" ]; then  # never replace a user's runs: a fresh lease's copy of the tree has none
    stage "$RUNS exists: move it away or give RUNS=another/folder; the recipes are not run"
    exit 1
fi
mkdir -p "$RUNS"
timeout 400 $PYTHON benchmarks/recipe.py configs/multi30k_rnn_gpu.yaml --out "$RUNS/rnn" \
    --json "$OUT/rnn_gpu.json" "${train[@]}" > "$RUNS/rnn.log" 2>&1 &
rnn=$!
timeout 470 $PYTHON benchmarks/recipe.py configs/multi30k_transformer_gpu.yaml --out "$RUNS/transformer" \
    --beams 5 --json "$OUT/transformer_gpu.json" "${train[@]}" > "$RUNS/transformer.log" 2>&1 &
transformer=$!
timeout 300 $PYTHON -m pytest -q -p no:cacheprovider -rA tests/test_cuda.py > "$OUT/test_cuda.log" 2>&1
echo "tests/test_cuda.py exit $?"; tail -n 15 "$OUT/test_cuda.log"
wait $rnn; echo "rnn recipe exit $?"; tail -n 8 "$RUNS/rnn.log"
wait $transformer; echo "transformer recipe exit $?"; tail -n 8 "$RUNS/transformer.log"
fi

finished=()
for run in "$RUNS/rnn" "$RUNS/transformer"; do [ -f "$run/best.pt" ] && finished+=("$run"); done
if want decode && [ ${#finished[@]} -gt 0 ]; then
    stage "decoding (alone on the device)"
    timeout 60 $PYTHON benchmarks/gpu.py decode "${finished[@]}" "${device[@]}" "${decode[@]}" \
        --json "$OUT/gpu_decode.json"
fi
if [ -d "$RUNS" ]; then
    stage "packing the runs (without checkpoints)"
    tar -czf "$OUT/runs.tar.gz" --exclude='*.pt' "$RUNS"
fi
stage "done"
