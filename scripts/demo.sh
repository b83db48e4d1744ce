#!/usr/bin/env bash
# make demo: what attention can compute, then a German→English translator trained for a few
# minutes, its translations, scores, heatmaps and an interactive viewer. Everything goes to demo/.
# Multi30k is read from $ATTNMT_DATA_DIR (the Makefile points it at ../shared/data when that
# exists), else from the cache, else downloaded once (about 2 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
ATTNMT=${ATTNMT:-.venv/bin/attnmt}
OUT=${DEMO_OUT:-demo}
MINUTES=${DEMO_MINUTES:-5}
mkdir -p "$OUT"

echo "== 1. What can one attention head compute? =="
"$ATTNMT" explore all --plot "$OUT/explore"

echo
echo "== 2. Train a German→English RNN translator with scaled dot-product attention ($MINUTES min) =="
# configs/multi30k_rnn_fast.yaml: the recipe chosen for BLEU per CPU minute (docs/results.md).
# bf16 needs a CPU with AVX512-BF16 or AMX; elsewhere float32 is faster.
RUN="$OUT/rnn-sdp"
PRECISION=fp32
if grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; then PRECISION=bf16; fi
if [ -f "$RUN/last.pt" ]; then
  "$ATTNMT" train --out "$RUN" --resume --max-minutes "$MINUTES"
else
  "$ATTNMT" train --config configs/multi30k_rnn_fast.yaml --out "$RUN" --max-minutes "$MINUTES" \
    --set "training.precision=$PRECISION"
fi

echo
echo "== 3. Translate =="
"$ATTNMT" translate "$RUN" "Ein Mann fährt Fahrrad." --plot "$OUT/fahrrad.png"
printf '%s\n' "Zwei Hunde spielen im Schnee." "Eine Frau mit einem roten Hut singt auf der Straße." \
  | "$ATTNMT" translate "$RUN" --beam 5

echo
echo "== 4. Evaluate on test_2016_flickr, beam 5 (perplexity, BLEU, chrF; heatmaps in $RUN/examples/) =="
"$ATTNMT" evaluate "$RUN" --split test_2016_flickr --beam 5 -n 5

echo
echo "== 5. Interactive attention viewer =="
"$ATTNMT" view "$RUN" -n 50 --out "$OUT/view.html"
echo "open $OUT/view.html in a browser"

echo
"$(dirname "$ATTNMT")/python" - "$RUN/eval-test_2016_flickr-beam5.json" "$MINUTES" <<'PY'
import json, sys
report = json.load(open(sys.argv[1], encoding="utf-8"))
print(f"demo: {sys.argv[2]} minutes of training gave {report['bleu']:.1f} BLEU on test_2016_flickr (beam 5, cased sacrebleu)")
PY

echo
echo "== 6. See it attend, live =="
echo "type your own sentences and watch the model attend: $ATTNMT serve $RUN   (then open the address it prints)"
