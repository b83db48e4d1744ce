#!/usr/bin/env bash
# attnmt against JoeyNMT 2.3 on one GPU, in one command of under ten minutes (docs/results.md, "On one GPU"):
#
#   A. each toolkit alone on the GPU, one after another, for tokens/s: attnmt's two GPU recipes and
#      JoeyNMT at the same sizes (rnn.yaml, transformer.yaml), both in fp16 autocast, JoeyNMT's only
#      mixed precision (PRECISION=fp32: both in float32; JoeyNMT 2.3 clips fp16 gradients while they
#      are still scaled, which slows its learning: see benchmarks/results/gpu/race_joeynmt_fp16), on the same files cut into the same pieces. JoeyNMT's batch_size is set to
#      the value whose batches hold as many target tokens as attnmt's, measured by batches.py with
#      each toolkit's own batching code on the pieces attnmt trained here;
#   B. the four trainings side by side for the same minutes, each stopping earlier if its own rule
#      says so (attnmt's early stopping; JoeyNMT has none that works on current PyTorch), with the
#      CUDA tests beside them;
#   C. each side's length penalty chosen on validation among 0.6, 1.0 and 1.2, then the test set
#      scored once per toolkit and model;
#   D. everything packed into $OUT/race.tar.gz (a lease brings back at most 8 files).
#
#   OUT=/tmp/race bash benchmarks/peers/joeynmt/race.sh            # on the GPU; carry .gpudata and .whl
#   SMOKE=1 OUT=/tmp/race-smoke ATTNMT_DATA_DIR=../shared/data PYTHON=.venv/bin/python JOEY_SITE=.peerlocal \
#       bash benchmarks/peers/joeynmt/race.sh                        # every step on a CPU in a few minutes
#
# .gpudata holds multi30k/ (the data); .whl the wheels JoeyNMT needs there (joeynmt 2.3.0,
# subword-nmt, importlib_metadata 8.5, and sentencepiece 0.2.0: JoeyNMT calls SetVocabulary, which
# 0.2.2 lacks). compare.py reads what comes back.
set -u
OUT=${OUT:-/tmp/race-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export ATTNMT_DATA_DIR=${ATTNMT_DATA_DIR:-$PWD/.gpudata}
PYTHON=${PYTHON:-python3}
RUNS=${RUNS:-runs/race}
PEER=$RUNS/peer
HERE=benchmarks/peers/joeynmt
DEADLINE=$((SECONDS + ${BUDGET_S:-560}))  # everything ends by then
stage() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*"; }
within() { local rest=$((DEADLINE - SECONDS)); echo $(( $1 < rest ? $1 : (rest > 5 ? rest : 5) )); }  # seconds
joey() { PYTHONPATH=$JOEY_SITE timeout "$1" "$PYTHON" -m joeynmt "${@:2}"; }
pack() {
    stage "D. packing"
    tar -czf "$OUT/race.tar.gz" --exclude='*.pt' --exclude='*.ckpt' --exclude='*.model' --exclude='*.vocab' \
        --exclude='*/data/*' --exclude='*/tensorboard/*' --exclude='tokenizers.json' --exclude='*.tokens' "$RUNS"
    ls -la "$OUT"
}
if [ -e "$RUNS" ]; then  # never replace a user's runs: a fresh lease's tree has none
    stage "$RUNS exists: move it away; nothing is run"; exit 1
fi
mkdir -p "$RUNS" "$PEER"

if [ "${SMOKE:-0}" = 1 ]; then  # every step on a CPU, never looking at the test set
    SPEED=0.05; MINUTES=0.15; JOEY_SPEED=40; JOEY_EXTRA=150; TEST=val; ALPHAS=(0.6 1.0)
    attnmt_device=(--set training.device=cpu --set training.precision=fp32 --set data.max_tokens=1024
                   --set search.max_len_a=0 --set search.max_len_b=3)
    JOEY_EDIT='s/^use_cuda: True/use_cuda: False/; s/use_cuda: True/use_cuda: False/; s/validation_freq: 300/validation_freq: 2/; s/logging_freq: 50/logging_freq: 2/; s/max_output_length: 100/max_output_length: 5/'
    CANDIDATES=(512 640); TESTS=(tests/test_cuda.py)
    JOEY_SITE=${JOEY_SITE:-.peerlocal}
else
    SPEED=0.33; MINUTES=${MINUTES:-4.5}; JOEY_SPEED=35; JOEY_EXTRA=15; TEST=test_2016_flickr; ALPHAS=(0.6 1.0 1.2)
    PRECISION=${PRECISION:-fp16}  # fp32: both toolkits in float32 (attnmt switches TF32 products on)
    attnmt_device=(--set training.precision="$PRECISION")
    if [ "$PRECISION" = fp16 ]; then JOEY_EDIT=''; else JOEY_EDIT='s/^fp16: True/fp16: False/'; fi
    CANDIDATES=(8704 8960 9216 9472 9728 9984); TESTS=(-rs tests/test_cuda.py)
    JOEY_SITE=${JOEY_SITE:-/tmp/joeysite}
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    stage "install"
    $PYTHON -m pip install -q --no-deps --no-build-isolation -e . || export PYTHONPATH=$PWD
    mkdir -p "$JOEY_SITE"
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$JOEY_SITE" .whl/*.whl \
        || { echo "the JoeyNMT wheels did not install"; exit 1; }
fi
$PYTHON -c "import attnmt, torch; print('attnmt', attnmt.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
PYTHONPATH=$JOEY_SITE $PYTHON -c "import joeynmt, sentencepiece; print('joeynmt', joeynmt.__version__, 'sentencepiece', sentencepiece.__version__)" \
    || exit 1

attnmt_train() {  # name recipe minutes [settings...]: attnmt's own trainer, its log and metrics.jsonl kept
    local name=$1 recipe=$2 minutes=$3; shift 3
    timeout "$(within "$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 120 }')")" $PYTHON -m attnmt train --config "$recipe" --out "$RUNS/$name" \
        --no-progress --max-minutes "$minutes" "${attnmt_device[@]}" "$@" > "$RUNS/$name.log" 2>&1
    echo "attnmt $name exit $?"; tail -n 1 "$RUNS/$name.log"
}
joey_config() {  # model name batch_size validation_freq: a JoeyNMT config of this race
    sed -e "s#runs/peer/data#$PEER/data#g; s#runs/peer/joey-$1#$PEER/$2#; s/batch_size: 9216/batch_size: $3/" \
        -e "s/validation_freq: 300/validation_freq: $4/" -e "$JOEY_EDIT" "$HERE/$1.yaml" > "$PEER/$2.yaml"
}

stage "A. tokens/s, each alone on the GPU (attnmt fp16, then JoeyNMT fp16)"
attnmt_train speed-rnn multi30k_rnn_gpu $SPEED
$PYTHON $HERE/prepare.py --tokenizer "$RUNS/speed-rnn/spm.joint.model" --out "$PEER/data" \
    --data "$ATTNMT_DATA_DIR/multi30k" || exit 1
joey_config rnn batches 9216 300
(PYTHONPATH=benchmarks:$JOEY_SITE${PYTHONPATH:+:$PYTHONPATH} $PYTHON $HERE/batches.py --recipe multi30k_rnn_gpu --joey-config "$PEER/batches.yaml" \
    --data "$PEER/data" --candidates "${CANDIDATES[@]}" --json "$RUNS/batches.json" 2>/dev/null | grep -v INFO) &
batches=$!
attnmt_train speed-transformer multi30k_transformer_gpu $SPEED
wait $batches
BATCH=$($PYTHON -c 'import json, sys; print(json.load(open(sys.argv[1]))["chosen_joeynmt_batch_size"])' "$RUNS/batches.json") \
    || exit 1
echo "JoeyNMT batch_size $BATCH"
for model in rnn transformer; do
    joey_config $model speed-joey-$model "$BATCH" 100000   # no validation inside the timed window
    joey "$JOEY_SPEED" train "$PEER/speed-joey-$model.yaml" --skip-test > "$PEER/speed-joey-$model.out" 2>&1
    echo "joeynmt $model exit $? (124: stopped by its time limit, as planned)"
    grep -E "16-bits training|Tokens per Sec" "$PEER/speed-joey-$model/train.log" | tail -n 2
done

stage "B. $MINUTES minutes each, side by side, with the CUDA tests beside"
(timeout "$(within 240)" $PYTHON -m pytest -q -p no:cacheprovider "${TESTS[@]}" > "$RUNS/test_cuda.log" 2>&1;
 echo "CUDA tests exit $?"; tail -n 3 "$RUNS/test_cuda.log") &
tests=$!
trainings=()
attnmt_train rnn multi30k_rnn_gpu "$MINUTES" & trainings+=($!)
attnmt_train transformer multi30k_transformer_gpu "$MINUTES" & trainings+=($!)
joey_seconds=$(awk -v m="$MINUTES" -v e="$JOEY_EXTRA" 'BEGIN { printf "%d", m * 60 + e }')  # + its start-up
for model in rnn transformer; do
    joey_config $model joey-$model "$BATCH" 300
    (joey "$(within "$joey_seconds")" train "$PEER/joey-$model.yaml" --skip-test > "$PEER/joey-$model.out" 2>&1
     echo "joeynmt $model exit $? (124: stopped by the race's time limit)") & trainings+=($!)
done
wait "${trainings[@]}"

stage "C. the length penalty on validation, then the test set once per toolkit and model"
export PYTHONPATH=benchmarks${PYTHONPATH:+:$PYTHONPATH}
decodes=()
for model in rnn transformer; do
    # JoeyNMT 2.3's beam search of an RNN fails under fp16 autocast ("mat1 and mat2 must have the same
    # dtype"): its RNN decodes in fp32; training precision is what the race compares
    if [ $model = rnn ]; then DECODE_EDIT='s/^fp16: True/fp16: False/'; else DECODE_EDIT=''; fi
    for alpha in "${ALPHAS[@]}"; do  # JoeyNMT's own beam search, dev only (no test: data.test removed)
        sed -e "/^  test: /d; s/beam_alpha: 1.0/beam_alpha: $alpha/" -e "$DECODE_EDIT" "$PEER/joey-$model.yaml" \
            > "$PEER/joey-$model-a$alpha.yaml"
        (joey "$(within 120)" test "$PEER/joey-$model-a$alpha.yaml" -o "$PEER/joey-$model/hyps-a$alpha" \
            > "$PEER/joey-$model-a$alpha.out" 2>&1 || echo "joeynmt test $model alpha $alpha failed") &
        decodes+=($!)
    done
    (timeout "$(within 120)" $PYTHON benchmarks/experiments/length_penalty.py "$RUNS/$model" --split valid \
        --alphas "${ALPHAS[@]}" --json "$RUNS/alpha-$model-valid.json" | tail -n 5) &
    decodes+=($!)
done
wait "${decodes[@]}"
decodes=()
for model in rnn transformer; do
    if [ $model = rnn ]; then DECODE_EDIT='s/^fp16: True/fp16: False/'; else DECODE_EDIT=''; fi
    alpha=$($PYTHON -c 'import json, sys
[run] = json.load(open(sys.argv[1]))["runs"]
print(max(run["by_alpha"], key=lambda row: row["bleu"])["alpha"])' "$RUNS/alpha-$model-valid.json") && {
        echo "attnmt $model: alpha $alpha chosen on validation"
        (timeout "$(within 90)" $PYTHON benchmarks/experiments/length_penalty.py "$RUNS/$model" --split "$TEST" \
            --alphas "$alpha" --json "$RUNS/chosen-$model-$TEST.json" | tail -n 3) &
        decodes+=($!)
    }
    files=(); for a in "${ALPHAS[@]}"; do files+=("$a=$PEER/joey-$model/hyps-a$a.dev"); done
    alpha=$($PYTHON $HERE/score.py --split val --choose "${files[@]}" --json "$PEER/joey-$model-alpha-valid.json") && {
        echo "JoeyNMT $model: alpha $alpha chosen on validation"
        if [ "$TEST" = val ]; then edit="s#^  test: .*#  test: \"$PEER/data/val\"#"; else edit=""; fi
        sed -e "s/beam_alpha: 1.0/beam_alpha: $alpha/" -e "$edit" -e "$DECODE_EDIT" "$PEER/joey-$model.yaml" \
            > "$PEER/joey-$model-chosen.yaml"
        (joey "$(within 90)" test "$PEER/joey-$model-chosen.yaml" -o "$PEER/joey-$model/hyps-chosen" \
            > "$PEER/joey-$model-chosen.out" 2>&1 &&
         $PYTHON $HERE/score.py --split "$TEST" "$alpha=$PEER/joey-$model/hyps-chosen.test" \
            --json "$PEER/joey-$model-chosen-$TEST.json") &
        decodes+=($!)
    }
done
wait "${decodes[@]}"
wait $tests
pack
stage "done"
