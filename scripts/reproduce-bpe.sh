#!/usr/bin/env bash
# Yu et al.'s tables on a corpus where rare tokens are learnable (docs/RESULTS.md): the corpus
# re-segmented into byte-pair pieces (`conelab data bpe`, merges learnt on train), then the
# freezing table (MLE, freeze Rare, drop (b), (c), (b)+(c)) on it, every row for each seed (the
# seed sets initialisation and data order), each run read on test at its best validation step.
#
#   scripts/reproduce-bpe.sh CORPUS MERGES STEPS OUT_DIR
#
# PTB at 4,000 merges: the Rare group's median training count is 34 (word level: 1–7).
# SEEDS, MODEL, PARALLEL and CONELAB as in scripts/reproduce-lib.sh.
source "$(dirname "$0")/reproduce-lib.sh"
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
start=$SECONDS
for seed in $seeds; do
    in_turn train_row "$out" "$bpe" "$steps" "MLE" "$seed"
    in_turn train_row "$out" "$bpe" "$steps" "freeze Rare" "$seed" --freeze rare
    in_turn train_row "$out" "$bpe" "$steps" "drop (b)" "$seed" --gate-freeze b
    in_turn train_row "$out" "$bpe" "$steps" "drop (c)" "$seed" --gate-freeze c
    in_turn train_row "$out" "$bpe" "$steps" "drop (b)+(c)" "$seed" --gate-freeze bc
done
finish
mapfile -t dirs < <(rows "$out" "MLE" "freeze Rare" "drop (b)" "drop (c)" "drop (b)+(c)")
table "$out" freezing-bpe "${dirs[@]}"
echo "== $(( SECONDS - start )) s in all"
