#!/usr/bin/env bash
# Yu et al. 2022 Tables 1 and 2 (docs/RESULTS.md): MLE, the Rare group's rows frozen, and the Rare
# group's gradient parts (b), (c) and (b)+(c) dropped; every row for each seed, then one table on
# the test split with mean ± std over the seeds.
#
#   scripts/reproduce-freezing.sh CORPUS STEPS OUT_DIR
#
# SEEDS, MODEL and CONELAB as in scripts/reproduce-lib.sh.
source "$(dirname "$0")/reproduce-lib.sh"
corpus=${1:?usage: reproduce-freezing.sh CORPUS STEPS OUT_DIR}
steps=${2:?steps}
out=${3:?out dir}
mkdir -p "$out"
start=$SECONDS
for seed in $seeds; do
    in_turn train_row "$out" "$corpus" "$steps" "MLE" "$seed"
    in_turn train_row "$out" "$corpus" "$steps" "freeze Rare" "$seed" --freeze rare
    in_turn train_row "$out" "$corpus" "$steps" "drop (b)" "$seed" --gate-freeze b
    in_turn train_row "$out" "$corpus" "$steps" "drop (c)" "$seed" --gate-freeze c
    in_turn train_row "$out" "$corpus" "$steps" "drop (b)+(c)" "$seed" --gate-freeze bc
done
finish
mapfile -t dirs < <(rows "$out" "MLE" "freeze Rare" "drop (b)" "drop (c)" "drop (b)+(c)")
table "$out" freezing "${dirs[@]}"
echo "== $(( SECONDS - start )) s in all"
