//! The groups table (Yu et al. Table 3): a row per run, or per set of seeds with mean ± std.

use super::*;

/// The column of an aggregated table listing the runs of each row.
pub(crate) const RUN_IDS: &str = "run_ids";

pub(crate) const GROUP_HEADERS: [(&str, &str); 4] = [
    ("frequent", "Freq"),
    ("medium", "Med"),
    ("rare", "Rare"),
    ("total", "Total"),
];

/// Which value of a column is the best of the runs (shown in bold).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Best {
    Lowest,
    Highest,
    /// A scale or a shape, not a score: nothing in bold.
    None,
}

/// Where a column of the groups table is read.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum ColumnSource {
    /// The held-out split's evaluation at the step.
    Eval,
    /// The embedding snapshot at or before the step.
    Embedding,
    /// The corpus's reference, recorded on the held-out split as the run started.
    Reference,
    /// ln(reference PPL / PPL): the context gain over KN-3 (methods.md §4).
    Gain,
}

/// One column of the groups table, repeated per group: (stored metric, column suffix, header,
/// decimals, best, where it is read).
pub(crate) type GroupColumn = (
    &'static str,
    &'static str,
    &'static str,
    usize,
    Best,
    ColumnSource,
);

/// I(W) is scale-dependent: the mean row norm, the mean cosine and IsoScore (scale-free) beside it
/// say whether two runs' I(W) can be compared.
pub(crate) const GROUP_COLUMNS: [GroupColumn; 9] = [
    ("ppl", "ppl", "PPL", 2, Best::Lowest, ColumnSource::Eval),
    // The bar of methods.md §4: the corpus's KN-3 trigram, and the gain over it.
    (
        "ref_ppl",
        "kn3_ppl",
        "KN-3 PPL",
        1,
        Best::None,
        ColumnSource::Reference,
    ),
    // Not bold: within a corpus it orders the runs as PPL does; its sign is what it says.
    ("ppl", "kn3_gain", "Gain", 2, Best::None, ColumnSource::Gain),
    ("uniq", "uniq", "Uniq", 0, Best::Highest, ColumnSource::Eval),
    (
        "i1",
        "i_w",
        "I(W)",
        3,
        Best::Highest,
        ColumnSource::Embedding,
    ),
    (
        "mean_norm",
        "mean_norm",
        "Norm",
        3,
        Best::None,
        ColumnSource::Embedding,
    ),
    (
        "mean_cos",
        "mean_cos",
        "Cos",
        3,
        Best::None,
        ColumnSource::Embedding,
    ),
    (
        "isoscore",
        "isoscore",
        "IsoScore",
        3,
        Best::Highest,
        ColumnSource::Embedding,
    ),
    // What IsoScore a random matrix of the group's size has: a group reading it never moved.
    (
        "isoscore_random",
        "isoscore_random",
        "Iso. random",
        3,
        Best::None,
        ColumnSource::Embedding,
    ),
];

/// The column of `uniq` in GROUP_COLUMNS (where the Human row's reference goes).
pub(crate) const UNIQ_COLUMN: usize = 3;

/// One run's row of the groups table.
pub(crate) struct GroupRow {
    label: String,
    id: String,
    step: u64,
    /// For each group, the GROUP_COLUMNS.
    values: Vec<Option<f64>>,
    /// What the run is apart from its seed (`--aggregate seeds`).
    setting: String,
    /// Its name, if it has one: runs of one name are seeds of one setting too.
    name: Option<String>,
    /// (seed, data seed) from its run.toml: what pairs it with a baseline's run.
    seeds: (Option<i64>, Option<i64>),
}

/// Yu et al. Table 3: one row per run, Freq / Med / Rare / Total × PPL, Uniq, I(W), mean norm,
/// mean cosine, IsoScore; a `Human` row with the reference text's Uniq.
pub(crate) fn groups(stores: &[LoadedStore], req: &ExportRequest) -> Result<Exported, StoreError> {
    let split = held_out(req)?;
    let choice = req.step.unwrap_or(StepChoice::Last);
    let mut rows = Vec::new();
    let mut human: Vec<Option<f64>> = vec![None; 4];
    for s in stores {
        let step = resolve_step(s, split, choice)?;
        let metrics = &s.metrics();
        let mut values = Vec::new();
        for (gi, (group, _)) in GROUP_HEADERS.iter().enumerate() {
            for (metric, _, _, _, _, source) in GROUP_COLUMNS {
                values.push(match source {
                    ColumnSource::Eval => value_at(metrics, split, group, metric, step)?,
                    ColumnSource::Embedding => {
                        value_at_or_before(metrics, split::EMBEDDING, group, metric, step)?
                            .map(|v| v.1)
                    }
                    ColumnSource::Reference => {
                        value_at_or_before(metrics, split, group, "ref_ppl", step)?.map(|v| v.1)
                    }
                    ColumnSource::Gain => {
                        let reference = value_at_or_before(metrics, split, group, "ref_ppl", step)?;
                        let ppl = value_at(metrics, split, group, "ppl", step)?;
                        match (reference, ppl) {
                            (Some((_, r)), Some(p)) if r > 0.0 && p > 0.0 => Some((r / p).ln()),
                            _ => None,
                        }
                    }
                });
            }
            if human[gi].is_none() {
                human[gi] = value_at(metrics, split, group, "human_uniq", step)?;
            }
        }
        let label = run_label(s, step)?;
        // The objectives in force, not the name: seeds named apart are still one setting.
        let objectives = query::objective_at(s.events(), Some(step))?.unwrap_or_default();
        rows.push(GroupRow {
            setting: setting_without_seed(&s.run().config_toml, &objectives, step),
            seeds: seeds_of(&s.run().config_toml),
            name: s.run().labels.name.clone(),
            label,
            id: s.run().run_id.clone(),
            step,
            values,
        });
    }
    let mut out = if let Some(baseline) = &req.paired_with {
        paired_groups_table(seed_sets(rows), baseline)?
    } else if req.aggregate_seeds {
        seed_groups_table(seed_sets(rows), &human)?
    } else {
        run_groups_table(rows, &human)?
    };
    out.warnings = warnings_of(stores);
    Ok(out)
}

/// A run's configuration with what a seed sweep varies taken out (the seed and data seed, the run's name and
/// the version that wrote it), plus the objectives in force and the step the table takes: runs
/// with equal settings are seeds of one experiment.
pub(crate) fn setting_without_seed(config_toml: &str, objectives: &str, step: u64) -> String {
    let config = match config_toml.parse::<toml::Table>() {
        Ok(mut t) => {
            t.remove("name");
            t.remove("conelab_version");
            if let Some(toml::Value::Table(train)) = t.get_mut("train") {
                // The data order is a seed too (`--data-seed`).
                train.remove("seed");
                train.remove("data_seed");
            }
            t.to_string()
        }
        // Unreadable: it groups with nothing but itself.
        Err(_) => config_toml.to_string(),
    };
    format!("{config}\n{objectives}\n{step}")
}

/// The run's (seed, data seed); a run without `--data-seed` has none.
fn seeds_of(config_toml: &str) -> (Option<i64>, Option<i64>) {
    let table = config_toml.parse::<toml::Table>().ok();
    let train = table.as_ref().and_then(|t| t.get("train"));
    let int = |key: &str| {
        train
            .and_then(|t| t.get(key))
            .and_then(toml::Value::as_integer)
    };
    (int("seed"), int("data_seed"))
}

/// The spanning headers of a groups table: `lead` columns without a group, then each group's.
pub(crate) fn group_spans(lead: usize, per_group: usize) -> Vec<(String, usize)> {
    let mut spans = vec![(String::new(), lead)];
    spans.extend(
        GROUP_HEADERS
            .iter()
            .map(|(_, s)| (s.to_string(), per_group)),
    );
    spans
}

/// `bold[row][lead + ci]` for the best of each value column among the first `rows` rows (not the
/// Human row), `values[row][ci]` being what is compared.
pub(crate) fn best_cells(
    values: &[Vec<Option<f64>>],
    rows: usize,
    height: usize,
    width: usize,
    column_of: impl Fn(usize) -> usize,
) -> Vec<Vec<bool>> {
    let per_group = GROUP_COLUMNS.len();
    let mut bold = vec![vec![false; width]; height];
    let n_values = GROUP_HEADERS.len() * per_group;
    for ci in 0..n_values {
        let best_is = GROUP_COLUMNS[ci % per_group].4;
        if best_is == Best::None || rows < 2 {
            continue;
        }
        let lower_is_better = best_is == Best::Lowest;
        let col_values: Vec<Option<f64>> = values[..rows].iter().map(|r| r[ci]).collect();
        let best = col_values
            .iter()
            .flatten()
            .filter(|v| v.is_finite())
            .copied()
            .reduce(|a, b| if lower_is_better { a.min(b) } else { a.max(b) });
        // A column where every run ties (Uniq 0 in every Rare cell) has no best.
        let all_tie = col_values.iter().flatten().all(|v| Some(*v) == best);
        if let Some(best) = best.filter(|_| !all_tie) {
            for (ri, v) in col_values.iter().enumerate() {
                if *v == Some(best) {
                    bold[ri][column_of(ci)] = true;
                }
            }
        }
    }
    bold
}

/// The Human row's values: the reference text's Uniq per group, nothing else.
pub(crate) fn human_values(human: &[Option<f64>]) -> Option<Vec<Option<f64>>> {
    let per_group = GROUP_COLUMNS.len();
    human.iter().any(Option::is_some).then(|| {
        let mut row = vec![None; GROUP_HEADERS.len() * per_group];
        for (gi, h) in human.iter().enumerate() {
            row[gi * per_group + UNIQ_COLUMN] = *h;
        }
        row
    })
}

/// One row per run.
pub(crate) fn run_groups_table(
    rows: Vec<GroupRow>,
    human: &[Option<f64>],
) -> Result<Exported, StoreError> {
    let per_group = GROUP_COLUMNS.len();
    let runs = rows.len();
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    let mut run_col = unique_names(rows.iter().map(|r| r.label.clone()).collect(), &ids);
    let mut id_col = ids;
    let mut step_col: Vec<Option<u64>> = rows.iter().map(|r| Some(r.step)).collect();
    let mut values: Vec<Vec<Option<f64>>> = rows.into_iter().map(|r| r.values).collect();
    if let Some(row) = human_values(human) {
        run_col.push("Human".into());
        id_col.push(String::new());
        step_col.push(None);
        values.push(row);
    }
    let height = run_col.len();
    let mut columns = vec![
        Column::new("run".into(), run_col),
        Column::new(c::RUN_ID.into(), id_col),
        Column::new(c::STEP.into(), step_col),
    ];
    let mut headers = vec!["Run".to_string(), "run id".into(), "Step".into()];
    let mut decimals: Vec<Option<usize>> = vec![None, None, Some(0)];
    for (gi, (group, _)) in GROUP_HEADERS.iter().enumerate() {
        for (mi, (_, suffix, header, digits, _, _)) in GROUP_COLUMNS.into_iter().enumerate() {
            let v: Vec<Option<f64>> = values.iter().map(|r| r[gi * per_group + mi]).collect();
            let name = format!("{group}_{suffix}");
            // A count (Uniq) is an integer column: CSV wrote `17.0` (issue #58).
            let whole = v
                .iter()
                .flatten()
                .all(|x| x.fract() == 0.0 && x.abs() < 9e15);
            columns.push(if digits == 0 && whole {
                let ints: Vec<Option<i64>> = v.iter().map(|x| x.map(|x| x as i64)).collect();
                Column::new(name.into(), ints)
            } else {
                Column::new(name.into(), v)
            });
            headers.push(header.into());
            decimals.push(Some(digits));
        }
    }
    let frame = DataFrame::new(height, columns)?;
    // Best per column among the runs (not the Human row): lowest PPL; highest Uniq, I(W) and
    // IsoScore.
    let bold = best_cells(&values, runs, height, headers.len(), |ci| 3 + ci);
    Ok(Exported {
        frame,
        layout: Layout {
            groups: group_spans(3, per_group),
            headers,
            decimals,
            bold,
            ..Layout::default()
        },
        warnings: Vec::new(),
    })
}

/// The values of one cell over a set of seeds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spread {
    pub mean: Option<f64>,
    /// Sample standard deviation (n − 1); none for a single value.
    pub std: Option<f64>,
    /// How many finite values there were.
    pub n: u32,
    /// Half-width of the 95 % t-interval of the mean, t(0.975, n − 1)·std/√n (methods.md §4);
    /// none for a single value.
    pub ci95: Option<f64>,
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom: the table for 1–30, then
/// the Cornish–Fisher expansion around the normal quantile (off by under 10⁻⁴ from 31 on).
pub fn t975(df: u32) -> f64 {
    const TABLE: [f64; 30] = [
        12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010,
        2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739,
        2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => TABLE[df as usize - 1],
        _ => {
            let (z, v) = (1.959_963_984_540_054f64, df as f64);
            z + (z.powi(3) + z) / (4.0 * v)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
                + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z)
                    / (384.0 * v.powi(3))
        }
    }
}

/// Mean, sample standard deviation and count of the finite values among `values`.
pub fn mean_std(values: impl IntoIterator<Item = Option<f64>>) -> Spread {
    let xs: Vec<f64> = values
        .into_iter()
        .flatten()
        .filter(|v| v.is_finite())
        .collect();
    let n = xs.len();
    if n == 0 {
        return Spread::default();
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let std = (n > 1)
        .then(|| (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
    Spread {
        mean: Some(mean),
        std,
        n: n as u32,
        ci95: std.map(|s| t975(n as u32 - 1) * s / (n as f64).sqrt()),
    }
}

/// The runs in sets that differ only by seed — the same name, or the same setting — in the order
/// their first run was given.
pub(crate) fn seed_sets(rows: Vec<GroupRow>) -> Vec<Vec<GroupRow>> {
    let mut sets: Vec<Vec<GroupRow>> = Vec::new();
    for row in rows {
        let same = |other: &GroupRow| {
            other.setting == row.setting || (row.name.is_some() && other.name == row.name)
        };
        match sets.iter_mut().find(|set| set.iter().any(same)) {
            Some(set) => set.push(row),
            None => sets.push(vec![row]),
        }
    }
    sets
}

/// methods.md §4: a difference between two settings run with the same seeds is read from the
/// per-seed paired differences — one row per setting other than `baseline`'s, every cell the mean,
/// std and 95 % t-interval of (run − the baseline's run of the same seed and data seed). A cell is
/// bold when its interval excludes 0: the direction holds.
pub(crate) fn paired_groups_table(
    sets: Vec<Vec<GroupRow>>,
    baseline: &str,
) -> Result<Exported, StoreError> {
    // By name or id only: a label (the objectives) can be several settings'.
    let is_baseline = |r: &GroupRow| r.name.as_deref() == Some(baseline) || r.id == baseline;
    if sets
        .iter()
        .filter(|set| set.iter().any(is_baseline))
        .count()
        > 1
    {
        return Err(Invalid::new(format!(
            "--paired-with {baseline}: runs of two settings go by that name or id; name the baseline's runs apart (--name)"
        ))
        .into());
    }
    let Some(bi) = sets.iter().position(|set| set.iter().any(is_baseline)) else {
        return Err(Invalid::new(format!(
            "--paired-with {baseline}: no run of that name or id among the runs given"
        ))
        .into());
    };
    let mut sets = sets;
    let base = sets.remove(bi);
    if sets.is_empty() {
        return Err(Invalid::new(format!(
            "--paired-with {baseline}: every run given is {baseline}'s; give the runs to compare with it too"
        ))
        .into());
    }
    let base_label = base[0]
        .name
        .clone()
        .unwrap_or_else(|| base[0].label.clone());
    let mut differences = Vec::with_capacity(sets.len());
    for set in sets {
        let mut paired = Vec::with_capacity(set.len());
        for mut row in set {
            let Some(b) = base.iter().find(|b| b.seeds == row.seeds) else {
                return Err(Invalid::new(format!(
                    "--paired-with {baseline}: run {} (seed {}, data seed {}) has no run of {baseline} with the same seeds",
                    row.id,
                    show_seed(row.seeds.0),
                    show_seed(row.seeds.1),
                ))
                .into());
            };
            for (v, w) in row.values.iter_mut().zip(&b.values) {
                *v = v.zip(*w).map(|(v, w)| v - w);
            }
            row.label = format!(
                "{} − {base_label}",
                row.name.as_deref().unwrap_or(&row.label)
            );
            paired.push(row);
        }
        differences.push(paired);
    }
    let mut out = seed_groups_table(differences, &[])?;
    // Bold: the interval excludes 0, not the best mean.
    let spread = out.layout.spread.clone();
    let height = out.frame.height();
    for (&mean_col, &(_, _, ci_col)) in &spread {
        let columns = out.frame.columns();
        let (means, cis) = (columns[mean_col].f64()?, columns[ci_col].f64()?);
        for row in 0..height {
            out.layout.bold[row][mean_col] = matches!(
                (means.get(row), cis.get(row)),
                (Some(m), Some(c)) if m.abs() > c
            );
        }
    }
    Ok(out)
}

fn show_seed(seed: Option<i64>) -> String {
    seed.map_or_else(|| "none".into(), |s| s.to_string())
}

/// One row per set of runs that differ only by seed (`seed_sets`): every cell the mean, sample
/// std and count of the runs' values.
pub(crate) fn seed_groups_table(
    sets: Vec<Vec<GroupRow>>,
    human: &[Option<f64>],
) -> Result<Exported, StoreError> {
    let per_group = GROUP_COLUMNS.len();
    let n_values = GROUP_HEADERS.len() * per_group;
    let firsts: Vec<String> = sets.iter().map(|set| set[0].id.clone()).collect();
    let mut run_col = unique_names(
        sets.iter().map(|set| set[0].label.clone()).collect(),
        &firsts,
    );
    let mut seeds_col: Vec<Option<u32>> = sets.iter().map(|set| Some(set.len() as u32)).collect();
    let mut ids_col: Vec<String> = sets
        .iter()
        .map(|set| {
            set.iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let mut step_col: Vec<Option<u64>> = sets.iter().map(|set| Some(set[0].step)).collect();
    // stats[row][ci]
    let mut stats: Vec<Vec<Spread>> = sets
        .iter()
        .map(|set| {
            (0..n_values)
                .map(|ci| mean_std(set.iter().map(|r| r.values[ci])))
                .collect()
        })
        .collect();
    let aggregated = sets.len();
    if let Some(row) = human_values(human) {
        run_col.push("Human".into());
        seeds_col.push(None);
        ids_col.push(String::new());
        step_col.push(None);
        stats.push(
            row.into_iter()
                .map(|v| Spread {
                    mean: v,
                    std: None,
                    n: u32::from(v.is_some()),
                    ci95: None,
                })
                .collect(),
        );
    }
    let height = run_col.len();
    let mut columns = vec![
        Column::new("run".into(), run_col),
        Column::new("seeds".into(), seeds_col),
        Column::new(RUN_IDS.into(), ids_col),
        Column::new(c::STEP.into(), step_col),
    ];
    const LEAD: usize = 4;
    let mut headers = vec![
        "Run".to_string(),
        "Seeds".into(),
        "run ids".into(),
        "Step".into(),
    ];
    let mut decimals: Vec<Option<usize>> = vec![None, Some(0), None, Some(0)];
    let mut spread = BTreeMap::new();
    for (gi, (group, _)) in GROUP_HEADERS.iter().enumerate() {
        for (mi, (_, suffix, header, digits, _, _)) in GROUP_COLUMNS.into_iter().enumerate() {
            let ci = gi * per_group + mi;
            let at = columns.len();
            let name = format!("{group}_{suffix}");
            columns.push(Column::new(
                format!("{name}_mean").into(),
                stats.iter().map(|r| r[ci].mean).collect::<Vec<_>>(),
            ));
            columns.push(Column::new(
                format!("{name}_std").into(),
                stats.iter().map(|r| r[ci].std).collect::<Vec<_>>(),
            ));
            columns.push(Column::new(
                format!("{name}_n").into(),
                stats.iter().map(|r| r[ci].n).collect::<Vec<_>>(),
            ));
            columns.push(Column::new(
                format!("{name}_ci95").into(),
                stats.iter().map(|r| r[ci].ci95).collect::<Vec<_>>(),
            ));
            headers.extend([
                header.to_string(),
                format!("{header} std"),
                format!("{header} n"),
                format!("{header} 95% CI ±"),
            ]);
            decimals.extend([Some(digits), Some(digits), Some(0), Some(digits)]);
            spread.insert(at, (at + 1, at + 2, at + 3));
        }
    }
    let frame = DataFrame::new(height, columns)?;
    let means: Vec<Vec<Option<f64>>> = stats
        .iter()
        .map(|r| r.iter().map(|c| c.mean).collect())
        .collect();
    let bold = best_cells(&means, aggregated, height, headers.len(), |ci| {
        LEAD + 4 * ci
    });
    Ok(Exported {
        frame,
        layout: Layout {
            groups: group_spans(LEAD, 4 * per_group),
            headers,
            decimals,
            bold,
            spread,
            row_count: Some(1),
        },
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Student's t quantiles against published tables (Abramowitz & Stegun 26.10), including
    /// past the table's end where the expansion takes over.
    #[test]
    fn t_quantiles_match_the_published_values() {
        for (df, want) in [
            (1, 12.706),
            (2, 4.303),
            (4, 2.776),
            (10, 2.228),
            (30, 2.042),
            (40, 2.021),
            (60, 2.000),
            (120, 1.980),
        ] {
            assert!(
                (t975(df) - want).abs() < 6e-4,
                "df {df}: {} vs {want}",
                t975(df)
            );
        }
        assert!(t975(0).is_nan());
        assert!((t975(100_000) - 1.95996).abs() < 1e-4);
    }

    /// Runs that differ by seed and data seed are one setting; by anything else, not.
    #[test]
    fn seeds_and_data_seeds_are_not_part_of_the_setting() {
        let run = |seed: u32, data_seed: u32, lr: f64| {
            format!(
                "name = \"r{seed}\"\n[train]\nseed = {seed}\ndata_seed = {data_seed}\nlr = {lr}\n"
            )
        };
        let setting = |toml: &str| setting_without_seed(toml, "MLE", 100);
        assert_eq!(setting(&run(1, 1, 1e-3)), setting(&run(2, 7, 1e-3)));
        assert_ne!(setting(&run(1, 1, 1e-3)), setting(&run(1, 1, 2e-3)));
    }
}
