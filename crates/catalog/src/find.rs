//! Which run a name means — a folder, a folder under the runs root, a run's name or folder name
//! known to this user, `NAME#SEED`, or a prefix only one of them has — and the live runs
//! `conelab attach` offers when given none.

use std::path::{Path, PathBuf};

use conelab_core::run_dir::RunDir;
use conelab_core::run_dir::live::{self, Liveness};

use crate::{RunError, index};

/// What `conelab attach` found.
pub enum Resolved {
    One(PathBuf),
    /// Several live runs: the user picks one (path, the name it goes by).
    Several(Vec<(PathBuf, String)>),
}

/// The name a run goes by: its label (`--name`, `conelab rename`), else its folder's name.
pub fn run_name(dir: &Path) -> String {
    conelab_store::read_run_record(&conelab_store::store_dir(dir))
        .ok()
        .and_then(|r| r.labels.name)
        .unwrap_or_else(|| folder_name(dir))
}

fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// How many candidates an ambiguous name lists.
const CANDIDATES_SHOWN: usize = 8;

fn ambiguous(arg: &str, found: &[(PathBuf, String)]) -> RunError {
    let mut list: Vec<String> = found
        .iter()
        .take(CANDIDATES_SHOWN)
        .map(|(p, name)| {
            let seed = RunDir::open(p)
                .map(|r| format!("#{}", r.spec().train.seed))
                .unwrap_or_default();
            format!("{name}{seed} ({})", p.display())
        })
        .collect();
    if found.len() > CANDIDATES_SHOWN {
        list.push(format!("and {} more", found.len() - CANDIDATES_SHOWN));
    }
    RunError::Usage(
        format!(
            "{arg} names {} runs: {}; give NAME#SEED, a longer name or the folder",
            found.len(),
            list.join(", ")
        )
        .into(),
    )
}

/// The run `arg` names among the `known` ones (not a path): a folder's name, a run's name,
/// `NAME#SEED` (a name holding a `#` itself is matched whole first), or a prefix that only one
/// run's name or folder starts with. Exact beats prefix; an ambiguous name is an error listing
/// the candidates.
pub fn find_known(arg: &str, known: &index::Known) -> Result<PathBuf, RunError> {
    let pick = |found: Vec<(PathBuf, String)>| match found.len() {
        0 => None,
        1 => Some(Ok(found[0].0.clone())),
        _ => Some(Err(ambiguous(arg, &found))),
    };
    let by_folder: Vec<(PathBuf, String)> = known
        .runs
        .iter()
        .filter(|p| folder_name(p) == arg)
        .map(|p| (p.clone(), run_name(p)))
        .collect();
    if let Some(r) = pick(by_folder) {
        return r;
    }
    let named: Vec<(PathBuf, String)> = known
        .runs
        .iter()
        .map(|p| (p.clone(), run_name(p)))
        .collect();
    // A name may hold a `#` itself: the whole argument as a name comes first.
    let exact: Vec<_> = named.iter().filter(|(_, n)| n == arg).cloned().collect();
    if let Some(r) = pick(exact) {
        return r;
    }
    if let Some((name, seed)) = arg.rsplit_once('#')
        && let Ok(seed) = seed.parse::<u64>()
    {
        let found: Vec<(PathBuf, String)> = named
            .iter()
            .filter(|(p, n)| {
                (n == name || folder_name(p) == name)
                    && RunDir::open(p).is_ok_and(|r| r.spec().train.seed == seed)
            })
            .cloned()
            .collect();
        if let Some(r) = pick(found) {
            return r;
        }
    }
    let prefix: Vec<_> = named
        .iter()
        .filter(|(p, n)| n.starts_with(arg) || folder_name(p).starts_with(arg))
        .cloned()
        .collect();
    if let Some(r) = pick(prefix) {
        return r;
    }
    Err(RunError::Usage(
        format!(
            "{arg}: no such run (not a folder, nor the name or folder of any of the {} runs known: `conelab runs` lists them)",
            known.runs.len()
        )
        .into(),
    ))
}

/// The run `arg` names: an existing folder (a path wins over a name), a folder under `root`,
/// else a run known to this user by name ([`find_known`]). Always absolute.
pub fn find(arg: &Path, root: &Path) -> Result<PathBuf, RunError> {
    if arg.is_dir() {
        return Ok(index::absolute(arg));
    }
    let under = root.join(arg);
    if under.is_dir() {
        return Ok(index::absolute(&under));
    }
    let known = index::known();
    for w in &known.warnings {
        conelab_base::stderr::say(&format!("warning: {w}"));
    }
    find_known(&arg.to_string_lossy(), &known)
}

/// The run `arg` names ([`find`]); without one, the live runs this user has (in the index and
/// the run roots).
pub fn resolve(arg: Option<&Path>, root: &Path) -> Result<Resolved, RunError> {
    if let Some(a) = arg {
        return find(a, root).map(Resolved::One);
    }
    let known = index::known();
    let mut live: Vec<(PathBuf, String)> = known
        .runs
        .iter()
        .filter(|p| matches!(live::liveness(p), Ok(Liveness::Live { .. })))
        .map(|p| (p.clone(), run_name(p)))
        .collect();
    match live.len() {
        0 => Err(RunError::Usage(format!(
            "no live run among the {} runs known (`conelab runs` lists them all; `conelab attach RUN` opens a finished one)",
            known.runs.len()
        ).into())),
        1 => Ok(Resolved::One(live.remove(0).0)),
        _ => Ok(Resolved::Several(live)),
    }
}

/// The runs `args` name ([`find`]), for the compare view: each must be a conelab run (a
/// run.toml or a metrics store), none twice.
pub fn resolve_many(args: &[PathBuf], root: &Path) -> Result<Vec<PathBuf>, RunError> {
    let mut out: Vec<PathBuf> = Vec::new();
    for a in args {
        let dir = find(a, root)?;
        let is_run = dir.join("run.toml").is_file()
            || conelab_store::store_dir(&dir)
                .join(conelab_store::RUN_RECORD)
                .is_file();
        if !is_run {
            return Err(RunError::Usage(
                format!(
                    "{}: not a conelab run (no run.toml, no metrics store)",
                    dir.display()
                )
                .into(),
            ));
        }
        if out.contains(&dir) {
            return Err(RunError::Usage(
                format!("{}: named twice", dir.display()).into(),
            ));
        }
        out.push(dir);
    }
    Ok(out)
}
