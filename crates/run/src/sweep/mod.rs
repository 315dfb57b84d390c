//! Sweeps: a grid of `conelab train` runs from one TOML file (`conelab sweep run FILE`).
//!
//! ```toml
//! [base]               # any `conelab train` option by its long name ("-" or "_"),
//! corpus = "synthetic" # plus `corpus` for the positional argument
//! model = "tiny"
//! [grid]               # each value a list of alternatives: the cartesian product of all keys
//! reg = ["cos=off", "cos=1"]
//! freeze = [[], ["rare"]]   # a repeatable option: one value, or a list of values, per alternative
//! [[zip]]              # lists of equal length that vary together
//! lr = [1e-3, 5e-4]
//! warmup = [100, 200]
//! [[zip]]              # seeds that vary the data order too (methods.md §4)
//! seed = [1, 2, 3]
//! data-seed = [1, 2, 3]
//! ```
//!
//! [`Sweep::parse`] checks everything before anything runs — a key given twice, an unknown
//! option, an empty list, unequal zip lists, a value `conelab train` refuses — and expands the
//! grid into [`PlannedRun`]s: each named by its varying values in the order written
//! (`seed-1_reg-cos=1`), labelled (`--name`) by that name without its seed and data-seed parts, so that the seeds
//! of one setting share a label and `export --aggregate seeds` puts them in one row. [`local`]
//! runs them on this machine, [`slurm`] as a job array; [`record`] keeps `sweep.json` and tells
//! their state; [`start`] is `conelab sweep run`, from the file to the exit status.

pub mod local;
pub mod record;

pub mod slurm;
pub mod start;

/// A sweep key that only varies the randomness of a run: `seed`, `data-seed` (`data_seed`).
fn is_seed_key(key: &str) -> bool {
    matches!(key, "seed" | "data-seed" | "data_seed")
}

use std::path::{Path, PathBuf};

use clap::{Args, FromArgMatches};

use crate::options::TrainOptions;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// Bad input: the file, a key, a value (exit 2).
    #[error("{0}")]
    Invalid(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("finding the conelab binary")]
    Exe(#[source] std::io::Error),
}

fn invalid(text: impl Into<String>) -> SweepError {
    SweepError::Invalid(text.into())
}

/// One run of the grid.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    /// Its folder's name under `runs/`: the varying values, `key-value` joined by `_`.
    pub name: String,
    /// Its `--name`: `name` without the seed part (the sweep's name when only the seed varies).
    pub label: String,
    /// The `conelab train` arguments (without `--run-dir`, `--name`, `--headless`).
    pub args: Vec<String>,
}

/// A parsed sweep file.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The file's text, kept in `sweep.json`.
    pub text: String,
    pub runs: Vec<PlannedRun>,
}

/// Resolves the paths a run's arguments name — the corpus and the `--config` and `--compare`
/// files — against `dir`, the sweep file's folder, where they exist there: each run starts in
/// a folder of its own, and a sweep file moved with its corpus beside it still works. A name
/// that is no path there (`ptb`, found under `$CONELAB_DATASETS`; `synthetic`) is kept.
fn resolve_paths(args: &mut [String], dir: &Path) {
    let absolute = |value: &str| -> Option<String> {
        let p = Path::new(value);
        if p.is_absolute() || value == "synthetic" {
            return None;
        }
        let there = dir.join(p);
        there
            .exists()
            .then(|| std::fs::canonicalize(&there).unwrap_or(there))
            .map(|p| p.display().to_string())
    };
    let mut previous: Option<String> = None;
    for (i, arg) in args.iter_mut().enumerate() {
        let is_path = (i == 0 && !arg.starts_with('-'))
            || matches!(previous.as_deref(), Some("--config" | "--compare"));
        previous = Some(arg.clone());
        if is_path && let Some(a) = absolute(arg) {
            *arg = a;
        }
    }
}

/// One option's value in the file: what it becomes on the command line.
fn arguments(key: &str, value: &toml::Value) -> Result<Vec<String>, SweepError> {
    let flag = format!("--{key}");
    let scalar = |v: &toml::Value| -> Result<String, SweepError> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            other => Err(invalid(format!(
                "{key}: {other} is not a value for --{key} (a string, a number, true/false, or a list of those for a repeatable option)"
            ))),
        }
    };
    Ok(match value {
        toml::Value::Boolean(true) => vec![flag],
        toml::Value::Boolean(false) => Vec::new(),
        toml::Value::Array(values) => {
            let mut out = Vec::new();
            for v in values {
                out.push(flag.clone());
                out.push(scalar(v)?);
            }
            out
        }
        v => vec![flag, scalar(v)?],
    })
}

/// How a value reads in a run's name: `cos=1`, `0.001`, `rare+medium`, `none`.
fn name_part(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(a) if a.is_empty() => "none".into(),
        toml::Value::Array(a) => a.iter().map(name_part).collect::<Vec<_>>().join("+"),
        v => v.to_string(),
    }
}

/// Characters outside `[A-Za-z0-9=._-]` become `-`.
fn safe(text: &str) -> String {
    conelab_base::name::path_component(text, "=._-", '-')
}

/// `conelab train`'s options by long name, and whether each takes a value.
fn train_command() -> clap::Command {
    TrainOptions::augment_args(clap::Command::new("train").no_binary_name(true))
}

/// The options a sweep may not set: where each run goes and how it reports are the sweep's.
const RESERVED: [&str; 6] = [
    "run-dir",
    "name",
    "headless",
    "detach",
    "resume",
    "internal-detached",
];

/// The most runs one sweep file may expand to: a sweep is run and tracked as one unit (one
/// `sweep.json`, one SLURM array — whose default limit is 1,001 tasks), and a typo such as
/// `seed = [0, …, 1999]` crossed with a long list should be refused at once, not expanded.
pub const MAX_RUNS: usize = 10_000;

/// One axis of the grid: a list of alternatives, each a set of (key, value).
type Axis = Vec<Vec<(String, toml::Value)>>;

impl Sweep {
    /// Parses and expands `text` (the sweep file; `stem` names the sweep when only the seed
    /// varies), checking every run's arguments as `conelab train` would; relative paths are
    /// taken from the current folder.
    pub fn parse(text: &str, stem: &str) -> Result<Self, SweepError> {
        Self::parse_in(text, stem, Path::new("."))
    }

    /// [`Self::parse`] of a file in `dir`: the paths it names are resolved against `dir`.
    pub fn parse_in(text: &str, stem: &str, dir: &Path) -> Result<Self, SweepError> {
        let doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| invalid(format!("not a sweep file: {}", e.message())))?;
        if doc.is_empty() {
            return Err(invalid(
                "an empty sweep file: nothing to run (a sweep file has [base], [grid] and [[zip]])",
            ));
        }
        for key in doc.keys() {
            if !["base", "grid", "zip"].contains(&key.as_str()) {
                return Err(invalid(format!(
                    "[{key}]: a sweep file has [base], [grid] and [[zip]] only"
                )));
            }
        }
        let known: Vec<String> = train_command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect();
        let mut seen: Vec<String> = Vec::new();
        let mut check_key = |key: &str, section: &str| -> Result<String, SweepError> {
            let canonical = key.replace('_', "-");
            if canonical != "corpus" && !known.contains(&canonical) {
                return Err(invalid(format!(
                    "{section}: {key}: not a `conelab train` option (see conelab train --help)"
                )));
            }
            if RESERVED.contains(&canonical.as_str()) {
                return Err(invalid(format!(
                    "{section}: {key}: set by the sweep itself (each run's folder, name and output)"
                )));
            }
            if seen.contains(&canonical) {
                return Err(invalid(format!("{section}: {key}: given twice")));
            }
            seen.push(canonical.clone());
            Ok(canonical)
        };
        let table = |name: &str| -> Result<Option<&toml::Table>, SweepError> {
            match doc.get(name) {
                None => Ok(None),
                Some(toml::Value::Table(t)) => Ok(Some(t)),
                Some(_) => Err(invalid(format!("[{name}] must be a table"))),
            }
        };
        let mut base: Vec<(String, toml::Value)> = Vec::new();
        if let Some(t) = table("base")? {
            for (k, v) in t {
                base.push((check_key(k, "[base]")?, v.clone()));
            }
        }
        let mut axes: Vec<Axis> = Vec::new();
        let alternatives = |section: &str, key: &str, v: &toml::Value| match v {
            toml::Value::Array(a) if a.is_empty() => Err(invalid(format!(
                "{section}: {key}: an empty list (nothing to run)"
            ))),
            toml::Value::Array(a) => Ok(a.clone()),
            _ => Err(invalid(format!(
                "{section}: {key}: a list of alternatives, e.g. {key} = [1, 2]"
            ))),
        };
        if let Some(t) = table("grid")? {
            for (k, v) in t {
                let key = check_key(k, "[grid]")?;
                let values = alternatives("[grid]", k, v)?;
                axes.push(values.into_iter().map(|v| vec![(key.clone(), v)]).collect());
            }
        }
        match doc.get("zip") {
            None => {}
            Some(toml::Value::Array(zips)) => {
                for (i, z) in zips.iter().enumerate() {
                    let section = format!("[[zip]] {}", i + 1);
                    let toml::Value::Table(t) = z else {
                        return Err(invalid(format!("{section}: must be a table")));
                    };
                    let mut columns: Vec<(String, Vec<toml::Value>)> = Vec::new();
                    for (k, v) in t {
                        columns.push((check_key(k, &section)?, alternatives(&section, k, v)?));
                    }
                    let len = columns.first().map_or(0, |c| c.1.len());
                    if let Some((k, c)) = columns.iter().find(|c| c.1.len() != len) {
                        return Err(invalid(format!(
                            "{section}: {k}: {} values where the others have {len} (zip lists vary together)",
                            c.len()
                        )));
                    }
                    axes.push(
                        (0..len)
                            .map(|row| {
                                columns
                                    .iter()
                                    .map(|(k, c)| (k.clone(), c[row].clone()))
                                    .collect()
                            })
                            .collect(),
                    );
                }
            }
            Some(_) => return Err(invalid("zip: write it as [[zip]] tables")),
        }
        let count = axes
            .iter()
            .try_fold(1usize, |n, axis| n.checked_mul(axis.len()))
            .filter(|&n| n <= MAX_RUNS);
        let Some(count) = count else {
            let sizes: Vec<String> = axes.iter().map(|a| a.len().to_string()).collect();
            return Err(invalid(format!(
                "the grid has {} runs, more than the {MAX_RUNS} a sweep may have: split it into several files",
                sizes.join(" × ")
            )));
        };
        // The cartesian product, the first axis slowest (the order written).
        let mut combos: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
        for axis in &axes {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    axis.iter().map(move |alt| {
                        let mut c = c.clone();
                        c.extend(alt.iter().cloned());
                        c
                    })
                })
                .collect();
        }
        let mut runs: Vec<PlannedRun> = Vec::with_capacity(count);
        let mut names = std::collections::HashSet::with_capacity(count);
        let mut command = train_command();
        for varying in combos {
            let part = |(k, v): &(String, toml::Value)| safe(&format!("{k}-{}", name_part(v)));
            let name = if varying.is_empty() {
                safe(stem)
            } else {
                varying.iter().map(part).collect::<Vec<_>>().join("_")
            };
            // The data order is a seed too (`--data-seed`, zipped with `seed` so that seeds vary
            // both): runs differing only there are one setting.
            let label_parts: Vec<String> = varying
                .iter()
                .filter(|(k, _)| !is_seed_key(k))
                .map(part)
                .collect();
            let label = if label_parts.is_empty() {
                safe(stem)
            } else {
                label_parts.join("_")
            };
            let mut args = Vec::new();
            let mut corpus = None;
            for (k, v) in base.iter().chain(&varying) {
                if k == "corpus" {
                    corpus = Some(
                        v.as_str()
                            .ok_or_else(|| invalid("corpus: a folder or \"synthetic\""))?
                            .to_string(),
                    );
                } else {
                    args.extend(arguments(k, v)?);
                }
            }
            if let Some(c) = corpus {
                args.insert(0, c);
            }
            resolve_paths(&mut args, dir);
            check_run(&mut command, &name, &args)?;
            if !names.insert(name.clone()) {
                return Err(invalid(format!(
                    "two runs would be called {name}: give the alternatives different values"
                )));
            }
            runs.push(PlannedRun { name, label, args });
        }
        Ok(Self {
            text: text.to_string(),
            runs,
        })
    }
}

/// The arguments parse as `conelab train`'s and pass its checks.
fn check_run(command: &mut clap::Command, name: &str, args: &[String]) -> Result<(), SweepError> {
    let matches = command.try_get_matches_from_mut(args).map_err(|e| {
        let rendered = e.render().to_string();
        let line = rendered
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("invalid")
            .trim_start_matches("error: ")
            .to_string();
        invalid(format!("run {name}: {line}"))
    })?;
    let opts = TrainOptions::from_arg_matches(&matches)
        .map_err(|e| invalid(format!("run {name}: {e}")))?;
    opts.validate()
        .map_err(|e| invalid(format!("run {name}: {}", conelab_base::error::chain(&e))))?;
    crate::launch::check(&opts)
        .map_err(|e| invalid(format!("run {name}: {}", conelab_base::error::chain(&e))))
}

/// The folder of run `name` in sweep folder `out`.
pub fn run_dir(out: &Path, name: &str) -> PathBuf {
    out.join("runs").join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[base]
corpus = "synthetic"
model = "tiny"
steps = 4
[grid]
seed = [1, 2]
reg = ["cos=off", "cos=1"]
freeze = [[], ["rare", "medium"]]
[[zip]]
lr = [1e-3, 5e-4]
warmup = [10, 20]
"#;

    #[test]
    fn the_grid_expands_in_the_order_written() {
        let s = Sweep::parse(FILE, "demo").expect("parses");
        assert_eq!(s.runs.len(), 2 * 2 * 2 * 2);
        assert_eq!(
            s.runs[0].name,
            "seed-1_reg-cos=off_freeze-none_lr-0.001_warmup-10"
        );
        assert_eq!(
            s.runs[1].name,
            "seed-1_reg-cos=off_freeze-none_lr-0.0005_warmup-20"
        );
        assert_eq!(
            s.runs[2].name,
            "seed-1_reg-cos=off_freeze-rare-medium_lr-0.001_warmup-10"
        );
        assert_eq!(s.runs[8].name[..6].to_string(), "seed-2");
        // Seeds of one setting share a label.
        assert_eq!(s.runs[0].label, s.runs[8].label);
        assert_eq!(
            s.runs[0].label,
            "reg-cos=off_freeze-none_lr-0.001_warmup-10"
        );
        assert_eq!(
            s.runs[2].args,
            [
                "synthetic",
                "--model",
                "tiny",
                "--steps",
                "4",
                "--seed",
                "1",
                "--reg",
                "cos=off",
                "--freeze",
                "rare",
                "--freeze",
                "medium",
                "--lr",
                "0.001",
                "--warmup",
                "10"
            ]
        );
    }

    #[test]
    fn only_seeds_varying_share_the_sweep_s_name() {
        let s = Sweep::parse("[base]\nsteps = 4\n[grid]\nseed = [1, 2, 3]\n", "mle").expect("ok");
        assert_eq!(s.runs.len(), 3);
        assert!(s.runs.iter().all(|r| r.label == "mle"));
        assert_eq!(s.runs[2].name, "seed-3");
        // Seeds zipped with data seeds: still one setting, and each run gets both flags.
        let s = Sweep::parse(
            "[base]\nsteps = 4\n[grid]\nreg = [\"cos=1\"]\n[[zip]]\nseed = [1, 2]\ndata-seed = [1, 2]\n",
            "mle",
        )
        .expect("ok");
        assert_eq!(s.runs.len(), 2);
        assert!(
            s.runs.iter().all(|r| r.label == "reg-cos=1"),
            "{:?}",
            s.runs
        );
        assert!(
            s.runs[1].args.windows(2).any(|w| w == ["--data-seed", "2"]),
            "{:?}",
            s.runs[1].args
        );
        let single = Sweep::parse("[base]\nsteps = 4\n", "one").expect("ok");
        assert_eq!(single.runs.len(), 1);
        assert_eq!(single.runs[0].name, "one");
    }

    #[test]
    fn bad_files_are_refused_naming_the_key() {
        let cases = [
            (
                "[base]\nseed = 1\n[grid]\nseed = [1, 2]\n",
                "[grid]: seed: given twice",
            ),
            (
                "[grid]\nsteps = [4]\n[[zip]]\nsteps = [1]\n",
                "steps: given twice",
            ),
            (
                "[grid]\nmodel_size = [1]\n",
                "model_size: not a `conelab train` option",
            ),
            ("[grid]\nseed = []\n", "seed: an empty list"),
            ("[grid]\nseed = 3\n", "seed: a list of alternatives"),
            (
                "[[zip]]\nlr = [1e-3, 1e-4]\nwarmup = [1]\n",
                "warmup: 1 values where the others have 2",
            ),
            (
                "[grid]\nmodel = [\"tiny\", \"huge\"]\n",
                "run model-huge: invalid value 'huge' for '--model",
            ),
            (
                "[base]\nrun_dir = \"x\"\n",
                "run_dir: set by the sweep itself",
            ),
            ("[grid]\nsteps = [{a = 1}]\n", "steps: {"),
            ("[other]\n", "[other]: a sweep file has"),
            ("", "an empty sweep file"),
            ("# only a comment\n", "an empty sweep file"),
            ("[grid\n", "not a sweep file"),
            (
                "[grid]\nlr = [0.001, 1e-3]\n",
                "two runs would be called lr-0.001",
            ),
        ];
        // Past the bound, by a product of lists each far below it, and past usize itself.
        let list = |n: usize| {
            let values: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            format!("[{}]", values.join(", "))
        };
        let over = format!("[grid]\nseed = {}\nsteps = {}\n", list(101), list(100));
        let huge = format!(
            "[grid]\nseed = {0}\nsteps = {0}\nwarmup = {0}\nkeep = {0}\nbatch = {0}\n",
            list(9000)
        );
        for (text, needle) in [
            (
                over.as_str(),
                "the grid has 101 × 100 runs, more than the 10000",
            ),
            (huge.as_str(), "9000 × 9000 × 9000 × 9000 × 9000 runs"),
        ] {
            match Sweep::parse(text, "s") {
                Err(SweepError::Invalid(e)) => assert!(e.contains(needle), "{e}"),
                other => panic!("{other:?}"),
            }
        }
        let at_bound = format!("[base]\nsteps = 4\n[grid]\nseed = {}\n", list(MAX_RUNS));
        assert_eq!(
            Sweep::parse(&at_bound, "s").expect("parses").runs.len(),
            MAX_RUNS
        );
        for (text, needle) in cases {
            match Sweep::parse(text, "s") {
                Err(SweepError::Invalid(e)) => assert!(e.contains(needle), "{text:?}: {e}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    /// A corpus folder named relative to the sweep file is found beside the file whatever the
    /// current folder, and passed on as an absolute path; a name that is no path there is kept.
    #[test]
    fn relative_paths_are_the_sweep_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let corpus = dir.path().join("data");
        std::fs::create_dir_all(&corpus).expect("mkdir");
        let text = "[base]\nsteps = 4\n[grid]\ncorpus = [\"data\", \"synthetic\"]\n";
        let s = Sweep::parse_in(text, "s", dir.path()).expect("parses");
        let firsts: Vec<&str> = s.runs.iter().map(|r| r.args[0].as_str()).collect();
        let want = std::fs::canonicalize(&corpus).expect("canonical");
        assert_eq!(firsts, [want.to_str().expect("utf-8"), "synthetic"]);
        // From another folder without the file's: the folder is not found.
        let e = Sweep::parse_in(text, "s", Path::new("/nonexistent")).expect_err("no data");
        assert!(e.to_string().contains("data"), "{e}");
    }
}
