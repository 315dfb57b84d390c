#!/usr/bin/env bash
# The later literature's measures (methods.md §2) on the runs of the freezing and fixes tables
# (docs/RESULTS.md), each at its best validation checkpoint: the hidden states on the test split's
# fixed sample (`conelab eval --step best`: mean cosine, IsoScore, self-similarity per input group,
# separability with its margin and cos(−u, mean Rare row)), and W's stolen rows per group, its
# all-but-the-top and rogue-dimension shares, neighbour frequency mix and TwoNN dimension
# (`conelab inspect RUN/best --stolen`). Per setting: the mean with its 95 % t-interval over the
# seeds; per setting and seed: the difference from the MLE run of the same seed, with the
# t-interval of those paired differences (methods.md §4(5)).
#
#   scripts/reproduce-later.sh OUT_DIR [SETTING…]
#
# OUT_DIR holds the runs of scripts/reproduce-freezing.sh and scripts/reproduce-fixes.sh
# (folders SETTING-sSEED; SETTINGs default to every one found). Writes OUT_DIR/later.csv (one row
# per run) and OUT_DIR/later.md (the table), and prints the table. CONELAB and SEEDS as in
# scripts/reproduce-lib.sh.
source "$(dirname "$0")/reproduce-lib.sh"
out=${1:?usage: reproduce-later.sh OUT_DIR [SETTING…]}
shift
if [ $# -gt 0 ]; then
    settings=("$@")
else
    mapfile -t settings < <(ls "$out" | sed -n 's/-s[0-9][0-9]*$//p' | sort -u)
fi
json="$out/later-json"
mkdir -p "$json"
start=$SECONDS
for setting in "${settings[@]}"; do
    for seed in $seeds; do
        dir="$out/$setting-s$seed"
        [ -d "$dir/best" ] || { echo "== $dir: no best/ checkpoint, left out" >&2; continue; }
        if [ ! -s "$json/$setting-s$seed.eval.json" ]; then
            echo "== $setting seed $seed: eval (test, best)" >&2
            "$bin" eval "$dir" --step best --split test --format json > "$json/$setting-s$seed.eval.json.tmp"
            mv "$json/$setting-s$seed.eval.json.tmp" "$json/$setting-s$seed.eval.json"
        fi
        if [ ! -s "$json/$setting-s$seed.inspect.json" ]; then
            echo "== $setting seed $seed: inspect --stolen (best)" >&2
            "$bin" inspect "$dir/best" --stolen --second-tier --format json > "$json/$setting-s$seed.inspect.json.tmp"
            mv "$json/$setting-s$seed.inspect.json.tmp" "$json/$setting-s$seed.inspect.json"
        fi
    done
done
echo "== $(( SECONDS - start )) s" >&2
python3 - "$json" "$out/later.csv" "$out/later.md" "${settings[@]}" <<'PY'
import json, math, os, sys

src, csv_path, md_path, *settings = sys.argv[1:]
# Two-sided 95 % t quantiles by degrees of freedom (methods.md §4(5): n − 1).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}

def get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return float("nan")
        d = d[p]
    return float("nan") if d is None else float(d)

# (column, header, reader of (eval, inspect) JSON)
COLUMNS = [
    ("ppl", "PPL", lambda e, i: get(e, "outputs", "ppl")),
    ("h_mean_cos", "h cos", lambda e, i: get(e, "hidden", "mean_cos")),
    ("h_isoscore", "h IsoScore", lambda e, i: get(e, "hidden", "isoscore")),
    ("h_separable", "h separable", lambda e, i: 1.0 if e.get("hidden", {}).get("separable") else 0.0),
    ("h_margin", "h margin", lambda e, i: get(e, "hidden", "margin")),
    ("h_neg_u_rare_cos", "cos(−u, Rare)", lambda e, i: get(e, "hidden", "neg_u_rare_cos")),
    ("h_self_sim_rare", "self-sim Rare", lambda e, i: float((e.get("hidden", {}).get("self_sim") or [math.nan] * 3)[2] or math.nan)),
    ("stolen_rare", "stolen Rare", lambda e, i: get(i, "stolen", "rare", "stolen")),
    ("stolen_total", "stolen all", lambda e, i: get(i, "stolen", "total", "stolen")),
    ("norm_count_rho", "ρ(norm, log n)", lambda e, i: get(i, "stolen", "norm_count_spearman")),
    ("abtt_top_variance", "top-D var", lambda e, i: get(i, "abtt_top_variance")),
    ("abtt_mean_cos", "cos w/o top", lambda e, i: get(i, "abtt_mean_cos")),
    ("rogue_share", "rogue-3", lambda e, i: get(i, "rogue_share")),
    ("mix_rare", "same-group nbrs Rare", lambda e, i: get(i, "second_tier", "neighbour_mix", "rare")),
    ("twonn_rare", "TwoNN Rare", lambda e, i: get(i, "second_tier", "two_nn", "rare")),
]

rows = {}
for name in sorted(os.listdir(src)):
    if not name.endswith(".eval.json"):
        continue
    run = name[: -len(".eval.json")]
    setting, seed = run.rsplit("-s", 1)
    try:
        with open(os.path.join(src, name)) as f:
            e = json.load(f)
        with open(os.path.join(src, run + ".inspect.json")) as f:
            i = json.load(f)
    except (OSError, ValueError) as err:
        print(f"{run}: {err}", file=sys.stderr)
        continue
    rows[(setting, int(seed))] = [c[2](e, i) for c in COLUMNS]

with open(csv_path, "w") as f:
    f.write("setting,seed," + ",".join(c[0] for c in COLUMNS) + "\n")
    for (setting, seed), values in sorted(rows.items()):
        f.write(f"{setting},{seed}," + ",".join(f"{v:.6g}" for v in values) + "\n")

def interval(values):
    values = [v for v in values if not math.isnan(v)]
    n = len(values)
    if n == 0:
        return "–"
    m = sum(values) / n
    if n < 2:
        return fmt(m)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    h = T95.get(n - 1, 1.96) * sd / math.sqrt(n)
    return f"{fmt(m)} [{fmt(m - h)}, {fmt(m + h)}]"

def fmt(v):
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}"

lines = ["| setting | seeds | " + " | ".join(c[1] for c in COLUMNS) + " |",
         "|---|---:|" + "---:|" * len(COLUMNS)]
ordered = [s for s in settings if any(k[0] == s for k in rows)]
for setting in ordered:
    seeds = sorted(k[1] for k in rows if k[0] == setting)
    cells = [interval([rows[(setting, s)][c] for s in seeds]) for c in range(len(COLUMNS))]
    lines.append(f"| {setting} | {len(seeds)} | " + " | ".join(cells) + " |")
if "mle" in ordered:
    lines += ["", "Paired by seed, setting − MLE (95 % t-interval of the per-seed differences; "
              "**bold** where it excludes 0):", "",
              "| setting | pairs | " + " | ".join(c[1] for c in COLUMNS) + " |",
              "|---|---:|" + "---:|" * len(COLUMNS)]
    for setting in ordered:
        if setting == "mle":
            continue
        seeds = sorted(s for (t, s) in rows if t == setting and ("mle", s) in rows)
        cells = []
        for c in range(len(COLUMNS)):
            diffs = [rows[(setting, s)][c] - rows[("mle", s)][c] for s in seeds]
            diffs = [d for d in diffs if not math.isnan(d)]
            text = interval(diffs)
            if len(diffs) >= 2:
                m = sum(diffs) / len(diffs)
                sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / (len(diffs) - 1))
                h = T95.get(len(diffs) - 1, 1.96) * sd / math.sqrt(len(diffs))
                if m - h > 0 or m + h < 0:
                    text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {setting} | {len(seeds)} | " + " | ".join(cells) + " |")
with open(md_path, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
