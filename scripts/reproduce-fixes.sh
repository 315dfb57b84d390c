#!/usr/bin/env bash
# The fixes of the cone against MLE (docs/RESULTS.md): CosReg (Gao et al. 2019), AGG (Yu et al.
# 2022), spectrum control (Wang et al. 2020) with c1 from a trained MLE model (so the prior does
# not clamp the spectrum at its initial scale) and DEV; every row for each seed, then one table
# on the test split with mean ± std over the seeds.
#
#   scripts/reproduce-fixes.sh CORPUS STEPS OUT_DIR [AGG]
#
# AGG is AGG's threshold as `--reg agg=` takes it after the weight: by default rare:0.2, α chosen
# from the training counts and the tokens per update so that the live rare set is the nearest
# achievable to 20 % of the vocabulary (the Rare group's size); or α itself in occurrences per
# update. Spectrum control's σ takes the proximal step that reaches the prior (the default).
# FIXES chooses the rows beside MLE (default "cosreg agg sc dev"; e.g. FIXES="cosreg agg sc"
# where DEV's row is not wanted). SEEDS, MODEL and CONELAB as in
# scripts/reproduce-lib.sh. The MLE rows are shared with scripts/reproduce-freezing.sh when OUT_DIR
# is the same.
source "$(dirname "$0")/reproduce-lib.sh"
corpus=${1:?usage: reproduce-fixes.sh CORPUS STEPS OUT_DIR [AGG]}
steps=${2:?steps}
out=${3:?out dir}
agg=${4:-rare:0.2}
c1=""
# fix KEY: the row's name and its objective flag.
fix() {
    case $1 in
        cosreg) echo "CosReg|cos=1" ;;
        agg) echo "AGG|agg=$agg" ;;
        sc) echo "spectrum control|sc=exp:1:c1=$c1" ;;
        dev) echo "DEV|dev=0.1" ;;
        *) echo "unknown fix '$1' in FIXES (cosreg, agg, sc, dev)" >&2; exit 2 ;;
    esac
}
# The rows are checked before anything is trained.
fixes=${FIXES:-cosreg agg sc dev}
names=("MLE")
for key in $fixes; do
    spec=$(fix "$key")
    names+=("${spec%%|*}")
done
mkdir -p "$out"
start=$SECONDS
for seed in $seeds; do
    in_turn train_row "$out" "$corpus" "$steps" "MLE" "$seed"
done
finish
# c1 = σ_1 of the trained MLE model (seed 1's, its last snapshot): the scale a prior fitted to a
# trained model would have.
first=${seeds%% *}
# The curves CSV is run_id,run,step,VALUE: the value is the last field.
c1=$("$bin" export "$out/mle-s$first" --table curves --metric embedding/sv_max --format csv \
    | tail -1 | awk -F, '{ print $NF }')
echo "== spectrum control: c1 = $c1 (σ_1 of MLE seed $first at step $steps)"
for seed in $seeds; do
    for key in $fixes; do
        spec=$(fix "$key")
        in_turn train_row "$out" "$corpus" "$steps" "${spec%%|*}" "$seed" --reg "${spec#*|}"
    done
done
finish
mapfile -t dirs < <(rows "$out" "${names[@]}")
table "$out" fixes "${dirs[@]}"
# DEV's claim is about log Z: μ_z and σ_z beside the table, from the same runs.
self_norm "$out" fixes "${dirs[@]}"
echo "== $(( SECONDS - start )) s in all"
