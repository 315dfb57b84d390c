#!/usr/bin/env bash
# Yu et al.'s tables on a corpus where rare tokens are learnable (docs/RESULTS.md): the corpus
# re-segmented into byte-pair pieces (`conelab data bpe`, merges learnt on train), its reference
# models, then scripts/reproduce-freezing.sh on it (MLE, freeze Rare, drop (b), (c), (b)+(c), every
# row for each seed, each run read on test at its best validation step). The fixes table follows
# with scripts/reproduce-fixes.sh OUT_DIR/corpus-bpeMERGES STEPS OUT_DIR (it reuses the MLE rows).
#
#   scripts/reproduce-bpe.sh CORPUS MERGES STEPS OUT_DIR
#
# PTB at 4,000 merges: the Rare group's median training count is 34 (word level: 1–7).
# SEEDS, MODEL, PARALLEL and CONELAB as in scripts/reproduce-lib.sh.
set -euo pipefail
bin=${CONELAB:-target/release/conelab}
corpus=${1:?usage: reproduce-bpe.sh CORPUS MERGES STEPS OUT_DIR}
merges=${2:?merges}
steps=${3:?steps}
out=${4:?out dir}
mkdir -p "$out"
bpe="$out/corpus-bpe$merges"
if [ ! -f "$bpe/train.txt" ]; then
    "$bin" data bpe "$corpus" --merges "$merges" --out "$bpe"
fi
"$bin" data baseline "$bpe"
exec "$(dirname "$0")/reproduce-freezing.sh" "$bpe" "$steps" "$out"
