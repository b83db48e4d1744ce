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
RUN="$OUT/rnn-sdp"
if [ -f "$RUN/last.pt" ]; then
  "$ATTNMT" train --out "$RUN" --resume --max-minutes "$MINUTES"
else
  "$ATTNMT" train --config configs/multi30k_rnn.yaml --attention sdp --out "$RUN" --max-minutes "$MINUTES"
fi

echo
echo "== 3. Translate =="
"$ATTNMT" translate "$RUN" "Ein Mann fährt Fahrrad." --plot "$OUT/fahrrad.png"
printf '%s\n' "Zwei Hunde spielen im Schnee." "Eine Frau mit einem roten Hut singt auf der Straße." \
  | "$ATTNMT" translate "$RUN" --beam 5

echo
echo "== 4. Evaluate on test_2016_flickr (perplexity, BLEU, chrF; heatmaps in $RUN/examples/) =="
"$ATTNMT" evaluate "$RUN" --split test_2016_flickr -n 5

echo
echo "== 5. Interactive attention viewer =="
"$ATTNMT" view "$RUN" -n 50 --out "$OUT/view.html"
echo "open $OUT/view.html in a browser"
