# Shared by the scripts/reproduce-*.sh: train a table's rows for several seeds, then export the
# table from the runs' stores (`conelab export --aggregate seeds`: mean ± std [95 % interval] per
# cell), each run at its best validation step, read on test (methods.md §4). A seed sets the
# initialisation and the data order (`--data-seed`). Sourced.
#
# Environment: CONELAB (the binary; default target/release/conelab), SEEDS (default "1 2 3"),
# MODEL (default tiny), EVAL_EVERY (default: STEPS / 4), PARALLEL (runs at once, default 1: a
# `tiny` run on the CPU keeps about one core busy, so 2 fills a 2-core machine); where set,
# DEVICE (`--device`, e.g. cuda), BATCH (`--batch`), PATIENCE (`--patience`: early stopping
# after that many validations without improvement) and CHECKPOINT_EVERY (default 0: only at the
# end; set it where a run may be cut short, as by a GPU session's time limit: the next call of
# the script resumes the run from its newest checkpoint).
set -euo pipefail
bin=${CONELAB:-target/release/conelab}
# A SIGTERM (`timeout`'s, sent to the whole process group) reaches every run too, which saves a
# checkpoint and stops: the script waits for them, so that the next call finds them saved.
trap 'trap "" TERM INT; wait; exit 143' TERM INT
seeds=${SEEDS:-1 2 3}
parallel=${PARALLEL:-1}
running=0

# in_turn COMMAND…: runs COMMAND in the background, at most PARALLEL at once (`finish` waits for
# the rest).
in_turn() {
    if [ "$running" -ge "$parallel" ]; then
        wait -n || true
        running=$(( running - 1 ))
    fi
    "$@" &
    running=$(( running + 1 ))
}

finish() {
    wait || true
    running=0
}
model=${MODEL:-tiny}
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release (or set CONELAB)" >&2; exit 2; }

# slug NAME: the folder name of a row: "drop (b)+(c)" → drop-b-c.
slug() {
    echo "$1" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/^-*//; s/-*$//'
}

# rows OUT NAME…: the run folders of these rows, every seed.
rows() {
    local out=$1
    shift
    local name seed
    for name in "$@"; do
        for seed in $seeds; do
            echo "$out/$(slug "$name")-s$seed"
        done
    done
}

# train_row OUT CORPUS STEPS NAME SEED [FLAGS…]: one run, OUT/NAME-sSEED, named NAME (so that the
# export puts its seeds in one row). A run that completed before is kept, one cut short after a
# checkpoint is resumed, any other started afresh (the script can be called again until done).
train_row() {
    # In the background subshell that runs this row: a SIGTERM waits for the run in the
    # foreground (bash runs the trap once it returns), which is saving its checkpoint.
    trap 'exit 143' TERM INT
    local out=$1 corpus=$2 steps=$3 name=$4 seed=$5
    shift 5
    local dir
    dir="$out/$(slug "$name")-s$seed"
    if grep -q '"status": *"completed"' "$dir/final.json" 2>/dev/null; then
        echo "== $dir: completed before, kept"
        return
    fi
    if compgen -G "$dir/step-*/model.safetensors" > /dev/null; then
        echo "== $name, seed $seed: resuming $dir"
        local start=$SECONDS
        "$bin" train --resume "$dir" --headless --log-every "$steps" \
            | grep -E '^(finished|diverged|eval)' | tail -2 || true
        echo "   $(( SECONDS - start )) s"
        return
    fi
    rm -rf "$dir"
    local eval_every=${EVAL_EVERY:-$(( steps / 4 > 0 ? steps / 4 : 1 ))}
    echo "== $name, seed $seed: $bin train $corpus --model $model --steps $steps --seed $seed $*"
    local start=$SECONDS
    local extra=()
    [ -z "${DEVICE:-}" ] || extra+=(--device "$DEVICE")
    [ -z "${BATCH:-}" ] || extra+=(--batch "$BATCH")
    [ -z "${PATIENCE:-}" ] || extra+=(--patience "$PATIENCE")
    "$bin" train "$corpus" --headless --model "$model" --steps "$steps" --seed "$seed" \
        --data-seed "$seed" --eval-test "${extra[@]}" \
        --eval-every "$eval_every" --checkpoint-every "${CHECKPOINT_EVERY:-0}" \
        --snapshot-every "$eval_every" \
        --log-every "$steps" --name "$name" --tag reproduce --run-dir "$dir" "$@" \
        | grep -E '^(finished|diverged|eval)' | tail -2 || true
    echo "   $(( SECONDS - start )) s"
}

# table OUT FILE_STEM RUN_DIR…: the groups table on the test split at each run's best validation
# step, seeds aggregated, as Markdown (printed and written to OUT/FILE_STEM.md) and CSV
# (OUT/FILE_STEM.csv, the source of the numbers); then each row's per-seed paired differences from
# the MLE rows (OUT/FILE_STEM-paired.{md,csv}: a direction holds where the interval excludes 0,
# methods.md §4).
table() {
    local out=$1 stem=$2
    shift 2
    local export=(export "$@" --table groups --aggregate seeds --split test --step best)
    "$bin" "${export[@]}" --out "$out/$stem.csv"
    "$bin" "${export[@]}" --out "$out/$stem.md"
    cat "$out/$stem.md"
    "$bin" "${export[@]}" --paired-with MLE --out "$out/$stem-paired.csv"
    "$bin" "${export[@]}" --paired-with MLE --out "$out/$stem-paired.md"
    cat "$out/$stem-paired.md"
}

# self_norm OUT FILE_STEM RUN_DIR…: μ_z and σ_z of log Z on the test split at each run's last
# evaluation (`conelab export --table curves`; its CSV rows end in the two values), mean ± sample
# std over the runs of one name, as
# Markdown (printed and written to OUT/FILE_STEM-self-norm.md); the per-run CSV beside it.
self_norm() {
    local out=$1 stem=$2
    shift 2
    local csv="$out/$stem-self-norm.csv"
    : > "$csv"
    local dir name
    for dir in "$@"; do
        name=$(basename "$dir" | sed 's/-s[0-9]*$//')
        "$bin" export "$dir" --table curves --metric test/mu_z,test/sigma_z --format csv \
            | tail -1 | sed "s/^/$name,/" >> "$csv"
    done
    awk -F, '
        { n[$1]++; if (!($1 in order)) { order[$1] = ++k; names[k] = $1 }
          mu = $(NF - 1); sg = $NF
          m[$1] += mu; mm[$1] += mu * mu; s[$1] += sg; ss[$1] += sg * sg }
        function sd(sum, sq, c) { return c > 1 ? sqrt((sq - sum * sum / c) / (c - 1)) : 0 }
        END {
            print "| Run | Seeds | μ_z (test) | σ_z (test) |"
            print "|---|---:|---:|---:|"
            for (i = 1; i <= k; i++) { r = names[i]; c = n[r]
                printf "| %s | %d | %.3f ± %.3f | %.3f ± %.3f |\n", r, c, m[r] / c,
                    sd(m[r], mm[r], c), s[r] / c, sd(s[r], ss[r], c) }
        }' "$csv" | tee "$out/$stem-self-norm.md"
}
