#!/usr/bin/env bash
# The second lease of a GPU (docs/results.md, "On one GPU"), in one command:
#
#   A. alone on the GPU, one after another: 20-30 seconds of training of attnmt's two GPU recipes and of
#      JoeyNMT 2.3 (benchmarks/peers/joeynmt) at the same sizes, on the same files and pieces, for
#      tokens/s;
#   B. side by side, 4 minutes each: attnmt's RNN recipe, two Transformer variants toward 42 BLEU,
#      and JoeyNMT's RNN and Transformer, each scored on validation only;
#   C. the length penalty of each attnmt run chosen on validation, then the test set scored once per
#      model kind with the run and alpha chosen; JoeyNMT's best checkpoints scored with its own beam
#      search; beam-5 decoding time and host reads per search step; then, side by side, the whole
#      test suite on the GPU machine (device "auto" means CUDA there) and torch.compile on the GPU.
#
#   OUT=/tmp/gpu-out bash benchmarks/gpu_peer_session.sh         # carry .gpudata and .whl
#   SMOKE=1 OUT=/tmp/gpu-smoke ATTNMT_DATA_DIR=../shared/data bash benchmarks/gpu_peer_session.sh  # CPU check
#
# .gpudata holds multi30k/ (the data) and peer/spm.joint.model (the sentencepiece model attnmt trains
# for these recipes, for JoeyNMT); .whl the wheels JoeyNMT needs there (joeynmt 2.3.0, subword-nmt,
# importlib_metadata, and sentencepiece 0.2.0: JoeyNMT calls SetVocabulary, which 0.2.2 lacks).
. "$(dirname "$0")/gpu_lease_preamble.sh"
RUNS=${RUNS:-runs/gpu2}
PEER=runs/peer
DEADLINE=$((SECONDS + ${BUDGET_S:-560}))  # everything ends by then; the runs are packed after it
within() { local rest=$((DEADLINE - SECONDS)); echo $(( $1 < rest ? $1 : (rest > 5 ? rest : 5) )); }  # seconds
if [ -e "$RUNS" ] || [ -e "$PEER" ]; then  # never replace a user's runs: a fresh lease's tree has none
    stage "$RUNS or $PEER exists: move it away; nothing is run"; exit 1
fi

if [ "${SMOKE:-0}" = 1 ]; then  # every step on a CPU in a few minutes, never looking at the test set
    SPEED=0.05; MINUTES=0.1; JOEY_SPEED=25; JOEY_TRAIN=40; TEST=valid; ALPHAS=(0.6)
    device=(--set training.device=cpu --set training.precision=fp32 --set search.max_len_a=0 --set search.max_len_b=3)
    decode_device=(--device cpu)
    JOEY_EDIT='s/use_cuda: True/use_cuda: False/; s/validation_freq: 300/validation_freq: 10/; s/logging_freq: 50/logging_freq: 5/'
    SUITE=(tests/test_cuda.py); COMPILE=(--device cpu --steps 2 --models rnn)
else
    SPEED=0.33; MINUTES=4; JOEY_SPEED=32; JOEY_TRAIN=255; TEST=test_2016_flickr; ALPHAS=(0.6 1.0 1.2)
    device=(); decode_device=(); JOEY_EDIT=''
    SUITE=(-n 12 -v -rf --tb=line tests)  # -v names each outcome as it comes, even when time runs out
    COMPILE=(--device cuda --precision bf16 --max-tokens 4096 --steps 100 --models transformer)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
fi

stage "install"
$PYTHON -m pip install -q --no-deps --no-build-isolation -e . || export PYTHONPATH=$PWD
mkdir -p /tmp/joeysite
for wheel in .whl/*.whl; do  # one at a time: a wheel for another Python is skipped, not fatal
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/joeysite "$wheel" \
        || echo "skipped $wheel"
done
$PYTHON -c "import attnmt, torch; print('attnmt', attnmt.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
$PYTHON benchmarks/peers/joeynmt/prepare.py --tokenizer .gpudata/peer/spm.joint.model --out $PEER/data \
    --data "$ATTNMT_DATA_DIR/multi30k" || exit 1
for model in rnn transformer; do  # the speed configs: no validation inside the timed window
    sed -e "s#$PEER/joey-$model#$PEER/speed-joey-$model#; s/validation_freq: 300/validation_freq: 100000/" \
        -e "$JOEY_EDIT" benchmarks/peers/joeynmt/$model.yaml > $PEER/speed-$model.yaml
    sed -e "$JOEY_EDIT" benchmarks/peers/joeynmt/$model.yaml > $PEER/$model.yaml
done
mkdir -p "$RUNS"

stage "A. tokens/s, each alone on the GPU"
for model in rnn transformer; do
    timeout $(within 60) $PYTHON -m attnmt train --config configs/multi30k_${model}_gpu.yaml --out "$RUNS/speed-$model" --no-progress \
        --max-minutes $SPEED "${device[@]}" > "$RUNS/speed-$model.log" 2>&1
    echo "attnmt $model exit $?"; tail -n 1 "$RUNS/speed-$model.log"
    timeout $JOEY_SPEED bash -c "PYTHONPATH=/tmp/joeysite $PYTHON -m joeynmt train $PEER/speed-$model.yaml --skip-test" \
        > "$PEER/speed-$model.log" 2>&1
    echo "joeynmt $model exit $? (124 = stopped by its time limit, as planned)"
    $PYTHON benchmarks/peers/joeynmt/summarize.py $PEER/speed-joey-$model --json "$PEER/joey-speed-$model.json" \
        | grep -E 'tokens_per_s|parameters'
done

stage "B. $MINUTES minutes each, side by side: attnmt's RNN and two Transformers, JoeyNMT's RNN and Transformer"
train() {  # name config settings...
    local name=$1 config=$2; shift 2
    timeout $(within 300) $PYTHON benchmarks/recipe.py "$config" --out "$RUNS/$name" --split valid --beams 5 \
        --json "$RUNS/$name.json" --set training.max_minutes=$MINUTES "${device[@]}" "$@" > "$RUNS/$name.log" 2>&1
    echo "attnmt $name exit $?"
}
trainings=()  # waited for by pid: a bare `wait` would also wait for the tee of the log
train rnn configs/multi30k_rnn_gpu.yaml & trainings+=($!)
train transformer-drop configs/multi30k_transformer_gpu.yaml --set model.dropout=0.3 \
    --set training.early_stopping_patience=8 --set training.max_epochs=100 & trainings+=($!)
train transformer-wide configs/multi30k_transformer_gpu.yaml --set model.d_model=512 --set model.num_heads=8 \
    --set model.ffn_dim=2048 --set model.dropout=0.3 --set training.early_stopping_patience=8 \
    --set training.max_epochs=100 & trainings+=($!)
for model in rnn transformer; do
    (timeout $JOEY_TRAIN bash -c "PYTHONPATH=/tmp/joeysite $PYTHON -m joeynmt train $PEER/$model.yaml --skip-test" \
        > "$PEER/train-$model.log" 2>&1; echo "joeynmt $model exit $? (124 = stopped by its time limit, as planned)") &
    trainings+=($!)
done
wait "${trainings[@]}"
for model in rnn transformer; do
    $PYTHON benchmarks/peers/joeynmt/summarize.py $PEER/joey-$model --json "$PEER/joey-train-$model.json" \
        | grep -E 'minutes|best_val|tokens_per_s_median'
done

tests=()
stage "C. length penalty on validation; the test set once per model kind; JoeyNMT's beam search beside"
for model in rnn transformer; do
    if [ -e $PEER/joey-$model/best.ckpt ]; then
        timeout $(within 120) bash -c "PYTHONPATH=/tmp/joeysite $PYTHON -m joeynmt test $PEER/$model.yaml -o $PEER/joey-$model/hyps" \
            > "$PEER/test-$model.log" 2>&1 &
        tests+=($!)
    fi
done
timeout $(within 60) $PYTHON benchmarks/length_penalty.py "$RUNS/rnn" --split valid --alphas "${ALPHAS[@]}" \
    --json "$RUNS/alpha-rnn.json" | tail -n 8
timeout $(within 90) $PYTHON benchmarks/length_penalty.py "$RUNS/transformer-drop" "$RUNS/transformer-wide" --split valid \
    --alphas "${ALPHAS[@]}" --json "$RUNS/alpha-transformer.json" | tail -n 12
choose() {  # the (run, alpha) of highest validation BLEU in a length_penalty.py JSON
    $PYTHON -c 'import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
run, best = max(((r["run"], a) for r in runs for a in r["by_alpha"]), key=lambda pair: pair[1]["bleu"])
print(run, best["alpha"])' "$1"
}
for kind in rnn transformer; do
    if read -r run alpha < <(choose "$RUNS/alpha-$kind.json"); then
        echo "chosen on validation for $kind: $run, alpha $alpha"
        timeout $(within 60) $PYTHON benchmarks/length_penalty.py "$run" --split $TEST --alphas "$alpha" \
            --json "$RUNS/chosen-$kind-$TEST.json" | tail -n 5
        echo "$run" >> "$RUNS/chosen.txt"
    fi
done
[ ${#tests[@]} -gt 0 ] && wait "${tests[@]}"
grep -h "Evaluation result" $PEER/test-*.log
if [ -s "$RUNS/chosen.txt" ]; then
    stage "decoding time and host reads per search step (alone on the GPU)"
    mapfile -t chosen < "$RUNS/chosen.txt"
    timeout $(within 60) $PYTHON benchmarks/gpu.py decode "${chosen[@]}" --split $TEST --batch-sizes 1000 --repeats 3 \
        --count-syncs "${decode_device[@]}" --json "$OUT/gpu_decode.json"
fi
stage "the whole suite on the GPU machine, and torch.compile on the GPU, side by side"
timeout $(within 200) $PYTHON -m pytest -q -p no:cacheprovider "${SUITE[@]}" > "$OUT/suite.log" 2>&1 &
suite=$!
timeout $(within 200) $PYTHON benchmarks/compile.py "${COMPILE[@]}" --output "$OUT/compile.json" > "$RUNS/compile.log" 2>&1
echo "compile exit $?"; tail -n 6 "$RUNS/compile.log"
wait $suite; echo "suite exit $?"; tail -n 3 "$OUT/suite.log"

stage "packing the runs (no checkpoints)"
tar -czf "$OUT/runs.tar.gz" --exclude='*.pt' --exclude='*.ckpt' --exclude='tensorboard' --exclude="$PEER/data" \
    "$RUNS" "$PEER"
stage "done"
