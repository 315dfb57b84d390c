#!/usr/bin/env bash
# The papers' directions on one corpus: MLE, CosReg γ=1, freeze-rare, AGG and spectrum control,
# same seed, same steps, then one comparison table on the test split (docs/RESULTS.md).
#
#   scripts/reproduce-directions.sh CORPUS STEPS OUT_DIR [AGG_ALPHA] [EXTRA TRAIN FLAGS…]
#
# CORPUS is a corpus directory or `synthetic`. AGG_ALPHA is in occurrences per update: pick it so
# the rare set is about the Rare group (PTB with the tiny preset, 1,024 tokens per update: 0.008,
# i.e. tokens seen ≲ 7 times per epoch). Set CONELAB to use another binary.
set -euo pipefail
corpus=${1:?usage: reproduce-directions.sh CORPUS STEPS OUT_DIR [AGG_ALPHA] [FLAGS…]}
steps=${2:?steps}
out=${3:?out dir}
alpha=${4:-0.008}
shift $(( $# < 4 ? $# : 4 ))
bin=${CONELAB:-target/release/conelab}
common=(--headless --steps "$steps" --seed 1 --eval-every 0 --checkpoint-every 0
        --snapshot-every 0 --log-every $(( steps / 4 > 0 ? steps / 4 : 1 )) "$@")
mkdir -p "$out"
run() {
    local name=$1; shift
    echo "== $name: $bin train $corpus ${common[*]} --run-dir $out/$name $*"
    local start=$SECONDS
    "$bin" train "$corpus" "${common[@]}" --run-dir "$out/$name" "$@" \
        | grep -E '^(start|step=|finished|diverged)' || true
    echo "   $(( SECONDS - start )) s"
}
run mle
run cosreg --reg cos=1
run freeze-rare --freeze rare
run agg --reg "agg=$alpha"
run spectrum --reg sc=exp:1
echo "== $bin eval --split test --format md $out/{mle,cosreg,freeze-rare,agg,spectrum}"
"$bin" eval --split test --format md "$out"/{mle,cosreg,freeze-rare,agg,spectrum}
