//! TensorBoard in and out: `export --format tfevents` writes a log folder (every stored metric
//! as a scalar named `split/group/metric`, and the checkpoints' embeddings in the Projector's
//! files), and `import-tb` reads the scalars of any TensorBoard log into conelab runs, so a
//! PyTorch run can be drawn beside conelab's in `compare`.

pub mod events;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use conelab_base::error::Invalid;
use conelab_core::run_dir::matrix::load_matrix;
use conelab_core::run_dir::{BEST_DIR, checkpoints_in};
use conelab_core::series::GROUPS;
use conelab_store::{LoadedStore, RunRecord, StoreError, StoreWriter, col as c};

use events::{FILE_VERSION, TfEvent, event};

/// The Projector's configuration file, beside the event file.
pub const PROJECTOR_CONFIG: &str = "projector_config.pbtxt";
/// The Projector's metadata: token, group, training count, a row per embedding row.
pub const PROJECTOR_METADATA: &str = "metadata.tsv";
/// Event files larger than this are not read (a bound on what a log can make `import-tb` hold).
pub const MAX_EVENT_FILE: u64 = 2 << 30;
/// Folders below the log folder searched for event files.
const MAX_DEPTH: usize = 16;

/// What [`write_log`] wrote.
#[derive(Debug, Default)]
pub struct LogWritten {
    /// Each run's folder in the log.
    pub runs: Vec<PathBuf>,
    pub scalars: usize,
    pub embeddings: usize,
    pub warnings: Vec<String>,
}

/// Writes a TensorBoard log folder `out` with one sub-folder per run (named by the name the run
/// goes by — its name, else its folder's — as TensorBoard names runs by folder): an event file with every stored metric, and each kept
/// checkpoint's embedding matrix for the Projector (`checkpoint`: only the one at that step, as
/// `--step` picks it). Every file
/// is written atomically; a second export of a run replaces its files.
pub fn write_log(
    runs: &[PathBuf],
    out: &Path,
    checkpoint: Option<crate::StepChoice>,
) -> Result<LogWritten, StoreError> {
    let mut written = LogWritten::default();
    let mut used: Vec<String> = Vec::new();
    for run in runs {
        let store = conelab_store::load(run)?;
        written.warnings.extend(store.warnings().iter().cloned());
        // The name the run goes by (issue #58: folders were named by run folder, so `import-tb`
        // made `tb-tiny-ptb-…` of a run called `ptb-mle`); the record's name and id are file
        // contents: one safe path component, unique in this log.
        let goes_by = store
            .run()
            .labels
            .name
            .as_deref()
            .unwrap_or(&store.run().run_id);
        let base = match sanitize(goes_by) {
            n if n.is_empty() => "run".to_string(),
            n => n,
        };
        let (mut name, mut k) = (base.clone(), 2);
        while used.contains(&name) {
            name = format!("{base}-{k}");
            k += 1;
        }
        used.push(name.clone());
        let dir = out.join(&name);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let (bytes, n, overflowed) = event_file(&store)?;
        // TensorBoard's scalars are float32: a finite value past its range reads as ±inf there.
        // Said, once a tag, so that an inf in TensorBoard is never taken for the run's value.
        for (tag, step, value) in overflowed {
            written.warnings.push(format!(
                "{}: {tag} at step {step} is {}, past TensorBoard's float32 scalars: it reads as {} there",
                run.display(),
                conelab_base::number::said(value),
                if value > 0.0 { "inf" } else { "-inf" }
            ));
        }
        let file = dir.join(format!(
            "events.out.tfevents.{}.conelab",
            store.run().started_unix.max(0.0) as u64
        ));
        conelab_base::atomic::write_file_as("tfevents", &file, &bytes).map_err(io(&file))?;
        written.scalars += n;
        let checkpoints = match checkpoint {
            Some(step) => vec![crate::neighbors::checkpoint_at(run, step)?],
            None => kept_checkpoints(run)?,
        };
        if checkpoints.is_empty() {
            written.warnings.push(format!(
                "{}: no checkpoint, so no embeddings for the Projector (scalars only)",
                run.display()
            ));
        }
        written.embeddings += write_projector(&dir, &checkpoints)?;
        written.runs.push(dir);
    }
    Ok(written)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The event file of a run's store: the version event, then every metric row in step order; and
/// the first finite value of each tag that float32 cannot hold (tag, step, value).
type Overflowed = Vec<(String, u64, f64)>;
fn event_file(store: &LoadedStore) -> Result<(Vec<u8>, usize, Overflowed), StoreError> {
    let m = &store.metrics();
    let (steps, times) = (m.column(c::STEP)?.u64()?, m.column(c::WALL_TIME)?.f64()?);
    let (splits, groups) = (m.column(c::SPLIT)?.str()?, m.column(c::GROUP)?.str()?);
    let (metrics, values) = (m.column(c::METRIC)?.str()?, m.column(c::VALUE)?.f64()?);
    let mut rows: Vec<(u64, f64, String, f64)> = Vec::with_capacity(m.height());
    for i in 0..m.height() {
        let (Some(step), Some(split), Some(group), Some(metric), Some(value)) = (
            steps.get(i),
            splits.get(i),
            groups.get(i),
            metrics.get(i),
            values.get(i),
        ) else {
            continue;
        };
        let time = times.get(i).unwrap_or(store.run().started_unix);
        rows.push((step, time, format!("{split}/{group}/{metric}"), value));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut bytes = Vec::with_capacity(40 * rows.len() + 64);
    events::push_event(
        &mut bytes,
        &TfEvent {
            wall_time: store.run().started_unix,
            step: 0,
            what: Some(event::What::FileVersion(FILE_VERSION.into())),
        },
    );
    let mut overflowed: Overflowed = Vec::new();
    for (step, time, tag, value) in &rows {
        let narrow = *value as f32;
        if value.is_finite() && !narrow.is_finite() && !overflowed.iter().any(|o| &o.0 == tag) {
            overflowed.push((tag.clone(), *step, *value));
        }
        let step = i64::try_from(*step).unwrap_or(i64::MAX);
        events::push_event(&mut bytes, &events::scalar_event(*time, step, tag, narrow));
    }
    Ok((bytes, rows.len(), overflowed))
}

/// The run's kept checkpoints (`step-N`), then `best/` where it is another step.
fn kept_checkpoints(run: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut out = checkpoints_in(run).map_err(StoreError::bad_input)?;
    let best = run.join(BEST_DIR);
    if best.is_dir() {
        out.push(best);
    }
    Ok(out)
}

/// The Projector's files for `checkpoints`: one tensor TSV each, one metadata TSV (the rows are
/// the vocabulary in every checkpoint of a run), and the configuration naming them. Returns
/// how many tensors were written.
fn write_projector(dir: &Path, checkpoints: &[PathBuf]) -> Result<usize, StoreError> {
    let mut config = String::new();
    let mut steps_written: Vec<Option<u64>> = Vec::new();
    let mut metadata_written = false;
    for ckpt in checkpoints {
        let m = load_matrix(ckpt, None).map_err(StoreError::bad_input)?;
        let is_best = ckpt.file_name().is_some_and(|n| n == BEST_DIR);
        // best/ is usually the last step's twin: one copy.
        if is_best && steps_written.contains(&m.step) {
            continue;
        }
        steps_written.push(m.step);
        let label = match (is_best, m.step) {
            (true, Some(s)) => format!("best (step {s})"),
            (true, None) => "best".to_string(),
            (false, Some(s)) => format!("step {s}"),
            (false, None) => "embedding".to_string(),
        };
        let file = match (is_best, m.step) {
            (true, _) => "embedding-best.tsv".to_string(),
            (false, Some(s)) => format!("embedding-step-{s:09}.tsv"),
            (false, None) => "embedding.tsv".to_string(),
        };
        let mut tsv = String::with_capacity(m.n * m.d * 12);
        for row in m.data.chunks(m.d.max(1)) {
            for (j, x) in row.iter().enumerate() {
                if j > 0 {
                    tsv.push('\t');
                }
                let _ = write!(tsv, "{x}");
            }
            tsv.push('\n');
        }
        let path = dir.join(&file);
        conelab_base::atomic::write_file_as("projector", &path, tsv.as_bytes())
            .map_err(io(&path))?;
        if !metadata_written {
            let meta = metadata(&m);
            let path = dir.join(PROJECTOR_METADATA);
            conelab_base::atomic::write_file_as("projector", &path, meta.as_bytes())
                .map_err(io(&path))?;
            metadata_written = true;
        }
        let _ = write!(
            config,
            "embeddings {{\n  tensor_name: {}\n  tensor_path: {}\n  metadata_path: {}\n  tensor_shape: {}\n  tensor_shape: {}\n}}\n",
            pbtxt_string(&format!("embedding {label}")),
            pbtxt_string(&file),
            pbtxt_string(PROJECTOR_METADATA),
            m.n,
            m.d,
        );
    }
    if !config.is_empty() {
        let path = dir.join(PROJECTOR_CONFIG);
        conelab_base::atomic::write_file_as("projector", &path, config.as_bytes())
            .map_err(io(&path))?;
    }
    Ok(steps_written.len())
}

/// The Projector's metadata: a header, then token, frequency group and training count per row
/// (a tab or newline in a token would split the row: written as a space).
fn metadata(m: &conelab_core::run_dir::matrix::LoadedMatrix) -> String {
    let groups = crate::row_groups(m);
    let mut out = String::from("token\tgroup\tcount\n");
    for i in 0..m.n {
        let token = m
            .tokens
            .as_ref()
            .and_then(|t| t.get(i))
            .map_or_else(|| i.to_string(), |t| t.replace(['\t', '\n', '\r'], " "));
        let group = groups.as_ref().map_or("", |g| g.group_of(i).name());
        let count = m
            .counts
            .as_ref()
            .and_then(|c| c.get(i))
            .map_or_else(String::new, u64::to_string);
        let _ = writeln!(out, "{token}\t{group}\t{count}");
    }
    out
}

/// A protocol-buffer text-format string literal.
fn pbtxt_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Where an imported scalar goes in a store: `split/group/metric…` where the second part is a
/// frequency group (conelab's own tags; a metric may hold a `/`, as `hist/0007` does); else the
/// first part is the split, the rest the metric (`Loss/train` → split `Loss`, metric `train`,
/// group `total`); a tag of one part goes to split `tb`.
pub fn store_key(tag: &str) -> (String, String, String) {
    let parts: Vec<&str> = tag.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [split, group, metric @ ..] if !metric.is_empty() && GROUPS.contains(group) => {
            (split.to_string(), group.to_string(), metric.join("/"))
        }
        [] => ("tb".into(), "total".into(), "value".into()),
        [one] => ("tb".into(), "total".into(), one.to_string()),
        [split, rest @ ..] => (split.to_string(), "total".into(), rest.join("/")),
    }
}

/// One run [`import_log`] made.
#[derive(Debug)]
pub struct ImportedRun {
    pub dir: PathBuf,
    pub scalars: usize,
    pub last_step: u64,
    /// The newest scalar's wall time (Unix seconds), when the logged run last wrote.
    pub last_wall_time: f64,
}

/// What [`import_log`] made.
#[derive(Debug, Default)]
pub struct Imported {
    pub runs: Vec<ImportedRun>,
    /// One line per damaged file or run without scalars.
    pub warnings: Vec<String>,
}

/// Reads every TensorBoard run under `logdir` (each folder holding `*tfevents*` files, as
/// TensorBoard reads them) into a conelab run folder under `out`, named `name` (and the run's
/// sub-folder, `name-sub-folder`), its store holding the scalars. Nothing is written over: a run
/// folder that exists already, or two runs that would get one name, is bad input found before
/// anything is written. Each run is built in a hidden folder and renamed into place, so a
/// failure leaves nothing half made; one event file at a time is held in memory.
pub fn import_log(logdir: &Path, out: &Path, name: &str) -> Result<Imported, StoreError> {
    if !logdir.is_dir() {
        return Err(Invalid::new(format!("{}: not a folder", logdir.display())).into());
    }
    let mut runs: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
    find_event_files(logdir, 0, &mut runs).map_err(io(logdir))?;
    if runs.is_empty() {
        return Err(Invalid::new(format!(
            "{}: no TensorBoard event files (events.out.tfevents.*) in it or below it",
            logdir.display()
        ))
        .into());
    }
    runs.sort();
    let base = match sanitize(name) {
        n if n.is_empty() => "tensorboard".to_string(),
        n => n,
    };
    let mut targets: Vec<(String, PathBuf)> = Vec::with_capacity(runs.len());
    for (dir, _) in &runs {
        let rel = dir.strip_prefix(logdir).unwrap_or(dir);
        let mut run_name = base.clone();
        for part in rel.components() {
            run_name.push('-');
            run_name.push_str(&sanitize(&part.as_os_str().to_string_lossy()));
        }
        let target = out.join(&run_name);
        if target.exists() {
            return Err(Invalid::new(format!(
                "{} exists already: import into another --out or under another --name (nothing is written over)",
                target.display()
            ))
            .into());
        }
        if let Some((_, first)) = targets.iter().find(|(n, _)| *n == run_name) {
            return Err(Invalid::new(format!(
                "{} and {} would both be run {run_name}: import them apart",
                first.display(),
                dir.display()
            ))
            .into());
        }
        targets.push((run_name, dir.clone()));
    }
    let made_out = !out.exists();
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut imported = Imported::default();
    for ((_, files), (run_name, dir)) in runs.iter().zip(&targets) {
        let target = out.join(run_name);
        match import_run(dir, files, run_name, &target, &mut imported.warnings)? {
            Some(run) => imported.runs.push(run),
            None => imported.warnings.push(format!(
                "{}: no scalars in its event files; no run made",
                dir.display()
            )),
        }
    }
    if imported.runs.is_empty() {
        // Nothing to show for it: bad input, said once, and no empty --out folder left behind.
        if made_out {
            let _ = std::fs::remove_dir(out);
        }
        let damage = imported
            .warnings
            .iter()
            .find(|w| !w.ends_with("no run made"))
            .map(|w| format!(" ({w})"))
            .unwrap_or_default();
        return Err(Invalid::new(format!(
            "{}: no scalars in any of its event files{damage}: nothing imported",
            logdir.display()
        ))
        .into());
    }
    Ok(imported)
}

/// `dir`'s event files, and those of every folder below it, grouped by folder.
fn find_event_files(
    dir: &Path,
    depth: usize,
    out: &mut Vec<(PathBuf, Vec<PathBuf>)>,
) -> std::io::Result<()> {
    let mut files = Vec::new();
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            subdirs.push(path);
        } else if kind.is_file() && entry.file_name().to_string_lossy().contains("tfevents") {
            files.push(path);
        }
    }
    if !files.is_empty() {
        // TensorBoard reads a run's files in name order (their names begin with the time).
        files.sort();
        out.push((dir.to_path_buf(), files));
    }
    if depth < MAX_DEPTH {
        for sub in subdirs {
            find_event_files(&sub, depth + 1, out)?;
        }
    }
    Ok(())
}

/// A name safe as one path component: letters, digits, `-`, `_` and `.` (not leading).
fn sanitize(s: &str) -> String {
    conelab_base::name::path_component(s, "-_.", '_')
        .trim_start_matches('.')
        .to_string()
}

/// One TensorBoard run's files into a new store at `target`, built beside it and renamed into
/// place; none when its files hold no scalar.
fn import_run(
    source: &Path,
    files: &[PathBuf],
    run_name: &str,
    target: &Path,
    warnings: &mut Vec<String>,
) -> Result<Option<ImportedRun>, StoreError> {
    let parent = target.parent().unwrap_or(Path::new("."));
    let building = parent.join(format!(".{run_name}.importing-{}", std::process::id()));
    if building.exists() {
        std::fs::remove_dir_all(&building).map_err(io(&building))?;
    }
    let result = (|| {
        let mut plugins = HashMap::new();
        let mut writer: Option<StoreWriter> = None;
        let mut run = ImportedRun {
            dir: target.to_path_buf(),
            scalars: 0,
            last_step: 0,
            last_wall_time: 0.0,
        };
        let mut negative = 0usize;
        for file in files {
            let size = std::fs::metadata(file).map_err(io(file))?.len();
            if size > MAX_EVENT_FILE {
                warnings.push(format!(
                    "{}: {size} bytes, over the {MAX_EVENT_FILE} read at most: skipped",
                    file.display()
                ));
                continue;
            }
            let bytes = std::fs::read(file).map_err(io(file))?;
            let (records, mut damage) = events::split_records(&bytes);
            // Nothing whole at all: not a damaged event file but none (issue #58: pure garbage
            // read as "1 damaged record skipped; truncated at byte 0", both and neither).
            if records.is_empty() && !damage.is_clean() {
                warnings.push(format!(
                    "{}: not a TensorBoard event file (none of its {} bytes is a record whose checksums hold)",
                    file.display(),
                    bytes.len()
                ));
                continue;
            }
            let scalars = events::scalars(&records, &mut plugins, &mut damage);
            if let Some(what) = damage.describe() {
                warnings.push(format!("{}: {what}", file.display()));
            }
            if scalars.is_empty() {
                continue;
            }
            let writer = match &mut writer {
                Some(w) => w,
                None => writer.insert(open_store(&building, run_name, source, &scalars)?),
            };
            for s in &scalars {
                let Ok(step) = u64::try_from(s.step) else {
                    negative += 1;
                    continue;
                };
                let (split, group, metric) = store_key(&s.tag);
                writer.push_metric_at(step, 0.0, s.wall_time, &split, &group, &metric, s.value);
                run.scalars += 1;
                run.last_step = run.last_step.max(step);
                if s.wall_time.is_finite() {
                    run.last_wall_time = run.last_wall_time.max(s.wall_time);
                }
                if run.scalars.is_multiple_of(100_000) {
                    writer.flush()?;
                }
            }
        }
        let Some(mut writer) = writer else {
            return Ok(None);
        };
        writer.push_event(0, "import", &source.display().to_string(), "", "");
        writer.flush()?;
        writer.compact()?;
        drop(writer);
        if negative > 0 {
            warnings.push(format!(
                "{}: {negative} scalars at a negative step left out",
                source.display()
            ));
        }
        std::fs::rename(&building, target).map_err(io(target))?;
        Ok::<Option<ImportedRun>, StoreError>(Some(run))
    })();
    if !matches!(result, Ok(Some(_))) {
        let _ = std::fs::remove_dir_all(&building);
    }
    result
}

/// The store of an imported run, its record started at the first file's earliest scalar.
fn open_store(
    building: &Path,
    run_name: &str,
    source: &Path,
    first: &[events::Scalar],
) -> Result<StoreWriter, StoreError> {
    let mut record = RunRecord::new(
        run_name,
        String::new(),
        source.display().to_string(),
        "tensorboard".into(),
    );
    record.started_unix = first
        .iter()
        .map(|s| s.wall_time)
        .filter(|t| t.is_finite() && *t > 0.0)
        .fold(f64::INFINITY, f64::min);
    if !record.started_unix.is_finite() {
        record.started_unix = 0.0;
    }
    record.labels.name = Some(run_name.to_string());
    record.labels.tags = vec!["tensorboard".into()];
    StoreWriter::open(building, &record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_map_to_split_group_metric() {
        let key = |t: &str| {
            let (a, b, c) = store_key(t);
            format!("{a}|{b}|{c}")
        };
        assert_eq!(key("valid/rare/ppl"), "valid|rare|ppl");
        assert_eq!(key("valid/total/ppl"), "valid|total|ppl");
        assert_eq!(key("Loss/train"), "Loss|total|train");
        assert_eq!(key("test/total/hist/0007"), "test|total|hist/0007");
        assert_eq!(key("a/b/c/d"), "a|total|b/c/d");
        assert_eq!(key("loss"), "tb|total|loss");
        assert_eq!(key("//"), "tb|total|value");
    }

    #[test]
    fn pbtxt_strings_are_escaped() {
        assert_eq!(pbtxt_string("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }
}
