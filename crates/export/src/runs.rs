//! The runs table: one row per run — who it is, how it went, and its hyper-parameters as typed
//! columns, so that a sweep's results are one join away (docs/STORE.md).

use super::*;
use conelab_store::RunRecord;

/// A text field of a run's record.
type TextField = fn(&RunRecord) -> String;

/// The columns every run has, before its hyper-parameters.
const FIXED: [&str; 16] = [
    c::RUN_ID,
    RUN_NAME,
    RUN_UUID,
    "dir",
    "status",
    "started_unix",
    "corpus",
    "device",
    "conelab_version",
    "git_revision",
    "tags",
    "notes",
    "last_step",
    "best_valid_ppl",
    "best_valid_step",
    "last_valid_ppl",
];

/// One row per run: `run_id`, `run`, `run_uuid`, `dir` (the folder, absolute), `status` (from
/// `final.json`: completed, stopped, diverged, failed, imported; null while the run is live or
/// after a crash), the start, the record's corpus, device, version and revision, tags (comma
/// separated) and notes, the last step stored, the best and the last total validation PPL; then
/// every key of `run.toml` flattened to a dotted path as a typed column — integers Int64,
/// numbers Float64, booleans Boolean, the rest text — a key whose type differs between the runs
/// becomes text. Keys named like a fixed column (`device`) are left to it.
pub(crate) fn runs_table(stores: &[LoadedStore], dirs: &[PathBuf]) -> Result<Exported, StoreError> {
    let height = stores.len();
    let mut columns = tables::identity_columns(stores);
    let text = |f: &dyn Fn(usize, &LoadedStore) -> Option<String>| -> Vec<Option<String>> {
        stores.iter().enumerate().map(|(i, s)| f(i, s)).collect()
    };
    columns.push(Column::new(
        "dir".into(),
        text(&|i, _| {
            dirs.get(i)
                .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()))
                .map(|d| d.display().to_string())
        }),
    ));
    // Checked against the run's manifest: a damaged final.json leaves the status blank, and
    // says so (a flipped byte once changed the status without a word).
    let mut damage = Vec::new();
    let statuses: Vec<Option<String>> = (0..height)
        .map(|i| {
            let dir = dirs.get(i)?;
            match conelab_core::run_dir::live::read_final(dir) {
                Ok(record) => record.map(|r| r.status),
                Err(e) => {
                    damage.push(format!("{e}: how the run ended is left blank"));
                    None
                }
            }
        })
        .collect();
    columns.push(Column::new("status".into(), statuses));
    columns.push(Column::new(
        "started_unix".into(),
        stores
            .iter()
            .map(|s| s.run().started_unix)
            .collect::<Vec<_>>(),
    ));
    // The record's own text fields, in FIXED's order.
    let record: [(&str, TextField); 6] = [
        ("corpus", |r| r.corpus.clone()),
        ("device", |r| r.device.clone()),
        ("conelab_version", |r| r.conelab_version.clone()),
        ("git_revision", |r| r.git_revision.clone()),
        ("tags", |r| r.labels.tags.join(",")),
        ("notes", |r| r.labels.notes.clone()),
    ];
    for (name, field) in record {
        columns.push(Column::new(name.into(), text(&|_, s| Some(field(s.run())))));
    }
    let mut last_step = Vec::with_capacity(height);
    let (mut best, mut best_step, mut last) = (Vec::new(), Vec::new(), Vec::new());
    for s in stores {
        let steps = s.metrics().column(c::STEP)?.u64()?;
        last_step.push(steps.max());
        let valid = query::history(s.metrics(), split::VALID, "total", "ppl", 0)?;
        let min = valid
            .steps
            .iter()
            .zip(&valid.values)
            .filter(|(_, v)| v.is_finite())
            .min_by(|a, b| a.1.total_cmp(b.1));
        best.push(min.map(|(_, v)| *v));
        best_step.push(min.map(|(s, _)| *s));
        last.push(valid.values.last().copied());
    }
    columns.push(Column::new("last_step".into(), last_step));
    columns.push(Column::new("best_valid_ppl".into(), best));
    columns.push(Column::new("best_valid_step".into(), best_step));
    columns.push(Column::new("last_valid_ppl".into(), last));
    debug_assert_eq!(
        columns
            .iter()
            .map(|c| c.name().as_str())
            .collect::<Vec<_>>(),
        FIXED
    );

    // The hyper-parameters, typed.
    let mut flat: Vec<BTreeMap<String, toml::Value>> = Vec::with_capacity(height);
    for s in stores {
        let mut keys = BTreeMap::new();
        // An imported run has no configuration; an unreadable one is said by the config table.
        if let Ok(table) = s.run().config_toml.parse::<toml::Table>() {
            tables::flatten("", &toml::Value::Table(table), true, &mut keys);
        }
        flat.push(keys);
    }
    let all: std::collections::BTreeSet<String> =
        flat.iter().flat_map(|k| k.keys().cloned()).collect();
    for key in all.iter().filter(|k| !FIXED.contains(&k.as_str())) {
        let values: Vec<Option<&toml::Value>> = flat.iter().map(|k| k.get(key)).collect();
        columns.push(typed_column(key, &values));
    }
    let mut out = plain(DataFrame::new(height, columns)?);
    out.warnings = warnings_of(stores);
    out.warnings.extend(damage);
    Ok(out)
}

/// One hyper-parameter's column: the narrowest type every run's value fits.
fn typed_column(name: &str, values: &[Option<&toml::Value>]) -> Column {
    use toml::Value as V;
    let present = || values.iter().flatten();
    if present().all(|v| matches!(v, V::Integer(_))) {
        let col: Vec<Option<i64>> = values
            .iter()
            .map(|v| v.and_then(|v| v.as_integer()))
            .collect();
        return Column::new(name.into(), col);
    }
    if present().all(|v| matches!(v, V::Integer(_) | V::Float(_))) {
        let col: Vec<Option<f64>> = values
            .iter()
            .map(|v| {
                v.and_then(|v| match v {
                    V::Integer(i) => Some(*i as f64),
                    V::Float(f) => Some(*f),
                    _ => None,
                })
            })
            .collect();
        return Column::new(name.into(), col);
    }
    if present().all(|v| matches!(v, V::Boolean(_))) {
        let col: Vec<Option<bool>> = values.iter().map(|v| v.and_then(|v| v.as_bool())).collect();
        return Column::new(name.into(), col);
    }
    let col: Vec<Option<String>> = values
        .iter()
        .map(|v| {
            v.map(|v| match v {
                V::String(s) => s.clone(),
                other => other.to_string(),
            })
        })
        .collect();
    Column::new(name.into(), col)
}
