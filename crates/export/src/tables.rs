//! The long tables: every metric row, chosen curves by step, each run's resolved configuration.

use super::*;
use conelab_core::words::nearest_names;

/// One row per run: `run_id` (its folder's name; `run`, the name it goes by, is added beside it),
/// then every key of its `run.toml` flattened to a dotted path
/// (`train.lr`, `model.transformer.layers`, `corpus.dir.path`), values as TOML writes them
/// (strings bare). Keys whose values differ between the runs, or that some runs lack, come first;
/// both parts sorted.
pub(crate) fn config_table(stores: &[LoadedStore]) -> Result<Exported, StoreError> {
    let mut flat = Vec::new();
    for s in stores {
        let table: toml::Table = s.run().config_toml.parse().map_err(|e: toml::de::Error| {
            StoreError::Invalid(
                format!(
                    "run {}: its recorded configuration is not TOML: {}",
                    s.run().run_id,
                    e.message()
                )
                .into(),
            )
        })?;
        let mut keys = BTreeMap::new();
        flatten_toml("", &toml::Value::Table(table), &mut keys);
        flat.push(keys);
    }
    let all: std::collections::BTreeSet<&String> = flat.iter().flat_map(|k| k.keys()).collect();
    let (differ, same): (Vec<&String>, Vec<&String>) = all.into_iter().partition(|key| {
        let first = flat[0].get(*key);
        flat.iter().any(|k| k.get(*key) != first)
    });
    let height = stores.len();
    let mut columns = identity_columns(stores);
    for key in differ.iter().chain(&same) {
        let values: Vec<Option<String>> = flat.iter().map(|k| k.get(*key).cloned()).collect();
        columns.push(Column::new(key.as_str().into(), values));
    }
    let mut out = plain(DataFrame::new(height, columns)?);
    out.warnings = warnings_of(stores);
    Ok(out)
}

/// `run_id`, `run` and `run_uuid`: a row per run.
pub(crate) fn identity_columns(stores: &[LoadedStore]) -> Vec<Column> {
    let of = |f: &dyn Fn(&LoadedStore) -> String| stores.iter().map(f).collect::<Vec<_>>();
    vec![
        Column::new(c::RUN_ID.into(), of(&|s| s.run().run_id.clone())),
        Column::new(RUN_NAME.into(), of(&|s| run_name(s).to_string())),
        Column::new(RUN_UUID.into(), of(&|s| s.run().uuid())),
    ]
}

/// `value`'s leaves under dotted keys below `prefix`; array elements as `key[i]`.
pub(crate) fn flatten_toml(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, String>) {
    let mut leaves = BTreeMap::new();
    flatten(prefix, value, false, &mut leaves);
    for (key, leaf) in leaves {
        let text = match leaf {
            toml::Value::String(text) => text,
            other => other.to_string(),
        };
        out.insert(key, text);
    }
}

/// `value`'s leaves under dotted keys, as TOML values; array elements as `key[i]` — every
/// array's with `split_arrays`, else only arrays of tables (an array of numbers stays one leaf).
pub(crate) fn flatten(
    prefix: &str,
    value: &toml::Value,
    split_arrays: bool,
    out: &mut BTreeMap<String, toml::Value>,
) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                flatten(&join(k), v, split_arrays, out);
            }
        }
        toml::Value::Array(items) if split_arrays || items.iter().any(|v| v.is_table()) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, split_arrays, out);
            }
        }
        leaf => {
            out.insert(prefix.to_string(), leaf.clone());
        }
    }
}

pub(crate) fn metrics_table(
    stores: &[LoadedStore],
    req: &ExportRequest,
) -> Result<Exported, StoreError> {
    let split = req.split.as_deref();
    let df = per_run(stores, |s| {
        let step = match req.step {
            None => None,
            Some(StepChoice::At(n)) => Some(n),
            // last/best are per run: the step each run is taken at.
            Some(choice) => Some(resolve_step(s, held_out(req)?, choice)?),
        };
        Ok(query::metric_rows(s.metrics(), split, step)?.select(conelab_store::METRIC_COLUMNS)?)
    })?;
    let mut out = plain(df);
    out.warnings = warnings_of(stores);
    Ok(out)
}

/// A curve name: `SPLIT/METRIC` (group total) or `SPLIT/GROUP/METRIC`.
pub(crate) fn parse_curve(name: &str) -> Result<(String, String, String), StoreError> {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [s, m] if !s.is_empty() && !m.is_empty() => {
            Ok((s.to_string(), "total".into(), m.to_string()))
        }
        [s, g, m] if !s.is_empty() && !g.is_empty() && !m.is_empty() => {
            Ok((s.to_string(), g.to_string(), m.to_string()))
        }
        _ => Err(StoreError::Invalid(format!(
            "'{name}' is not a curve: use SPLIT/METRIC or SPLIT/GROUP/METRIC, e.g. valid/ppl or embedding/rare/i1"
        ).into())),
    }
}

/// Known curve names of a set of runs, for error messages.
pub(crate) fn known_curves(stores: &[LoadedStore]) -> Result<Vec<String>, StoreError> {
    let mut names = std::collections::BTreeSet::new();
    for s in stores {
        for v in query::last_values_vec(s.metrics())? {
            if v.split == split::SPECTRUM {
                continue;
            }
            names.insert(if v.group == "total" {
                format!("{}/{}", v.split, v.metric)
            } else {
                format!("{}/{}/{}", v.split, v.group, v.metric)
            });
        }
    }
    Ok(names.into_iter().collect())
}

/// How many known names an unknown metric's error names (a store knows hundreds: the histogram
/// cells alone are a few hundred).
const SUGGESTIONS: usize = 8;

/// The one-line error for a metric no store has: the known names nearest to it
/// ([`nearest_names`]), at most [`SUGGESTIONS`], and how many there are in all.
fn unknown_metric(name: &str, known: &[String]) -> String {
    let shown = nearest_names(name, known, SUGGESTIONS);
    let more = known.len().saturating_sub(shown.len());
    format!(
        "unknown metric '{name}' (nearest known: {}{})",
        shown.join(", "),
        if more > 0 {
            format!("; {more} more: `conelab export RUN --table metrics` lists every row")
        } else {
            String::new()
        }
    )
}

pub(crate) fn curves(stores: &[LoadedStore], req: &ExportRequest) -> Result<Exported, StoreError> {
    let names: Vec<String> = if req.metrics.is_empty() {
        DEFAULT_CURVES.iter().map(|s| s.to_string()).collect()
    } else {
        req.metrics.clone()
    };
    let parsed = names
        .iter()
        .map(|n| parse_curve(n))
        .collect::<Result<Vec<_>, _>>()?;
    // (run index, step) → value per curve.
    let mut rows: BTreeMap<(usize, u64), Vec<Option<f64>>> = BTreeMap::new();
    for (ci, (sp, g, m)) in parsed.iter().enumerate() {
        let mut found = false;
        for (ri, s) in stores.iter().enumerate() {
            let h = query::history(s.metrics(), sp, g, m, 0)?;
            found |= !h.is_empty();
            for (step, v) in h.steps.iter().zip(&h.values) {
                rows.entry((ri, *step))
                    .or_insert_with(|| vec![None; parsed.len()])[ci] = Some(*v);
            }
        }
        if !found && !req.metrics.is_empty() {
            let known = known_curves(stores)?;
            return Err(StoreError::Invalid(
                unknown_metric(&names[ci], &known).into(),
            ));
        }
    }
    // Once per run (an old store's UUID is derived), then a row each.
    let of_run = |f: &dyn Fn(&LoadedStore) -> String| -> Vec<String> {
        let per_run: Vec<String> = stores.iter().map(f).collect();
        rows.keys().map(|(r, _)| per_run[*r].clone()).collect()
    };
    let steps: Vec<u64> = rows.keys().map(|(_, s)| *s).collect();
    let mut columns = vec![
        Column::new(c::RUN_ID.into(), of_run(&|s| s.run().run_id.clone())),
        Column::new(RUN_NAME.into(), of_run(&|s| run_name(s).to_string())),
        Column::new(RUN_UUID.into(), of_run(&|s| s.run().uuid())),
        Column::new(c::STEP.into(), steps),
    ];
    for (ci, name) in names.iter().enumerate() {
        let v: Vec<Option<f64>> = rows.values().map(|r| r[ci]).collect();
        columns.push(Column::new(name.as_str().into(), v));
    }
    let mut out = plain(DataFrame::new(rows.len(), columns)?);
    out.warnings = warnings_of(stores);
    Ok(out)
}

#[cfg(test)]
mod unknown_metric_tests {
    use super::{SUGGESTIONS, unknown_metric};

    /// A store knows hundreds of names (here 700, as a run with histogram cells does): the error
    /// names the nearest few, nearest first, and counts the rest, on one line.
    #[test]
    fn a_mistyped_metric_gets_the_nearest_names_not_all_of_them() {
        let mut known: Vec<String> = (0..690).map(|i| format!("valid/hist/{i:04}")).collect();
        known.extend(
            [
                "valid/ppl",
                "valid/uniq",
                "test/ppl",
                "embedding/sc_u_orth",
                "embedding/i1",
            ]
            .map(String::from),
        );
        known.extend((0..5).map(|i| format!("train/m{i}")));
        let line = unknown_metric("embedding/sc_orth_u", &known);
        assert!(!line.contains('\n'));
        let listed = line
            .split("nearest known: ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .expect("a list");
        let names: Vec<&str> = listed.trim_end_matches(')').split(", ").collect();
        assert_eq!(names.len(), SUGGESTIONS, "{line}");
        assert_eq!(names[0], "embedding/sc_u_orth", "{line}");
        assert!(
            line.contains(&format!("{} more", known.len() - SUGGESTIONS)),
            "{line}"
        );
        assert!(unknown_metric("valid/pll", &known).contains("nearest known: valid/ppl"));
        // Few names: all of them, and no "more".
        let few = unknown_metric("x", &["a/b".to_string()]);
        assert!(few.ends_with("(nearest known: a/b)"), "{few}");
    }
}
