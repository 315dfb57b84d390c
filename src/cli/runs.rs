//! `conelab runs`: the runs this user has (or those under a folder) and their status.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};

use conelab_catalog::list::SortBy;

use super::print_stdout;

/// What `--help` says beyond the one-line summary (set on the subcommand in `cli/mod.rs`: a
/// `long_about` here is overridden by the variant's doc comment, and was never shown).
pub const LONG_ABOUT: &str = "One row per run: name, folder, seed, sweep (where any run is in one), tags, \
status (live with its pid and host, completed, stopped, diverged, failed, crashed — no live \
process and no final record — imported (`import-tb`), damaged, or unreadable with the reason), step / total, device, \
objectives in force, best validation PPL, newest I1 and mean cosine, start time (UTC) and wall \
time.\n\nWithout DIR: every run this user has — those in the run index (each run registers \
itself when it starts, in $XDG_STATE_HOME/conelab/runs) and those in the run roots \
($CONELAB_RUNS, the config file's run_roots, ./checkpoints; `conelab config show` prints them). \
With DIR: the runs in that folder (a sweep folder: its runs).\n\nJSON (`--format json`, stable): an array \
of objects with the keys name, dir, seed, sweep, path, tags, notes, status, host, pid, step, \
total_steps, device, objective, best_valid_ppl, i1, mean_cos, started (RFC 3339), seconds; null \
where unknown; reason for an unreadable folder, damaged for damage found, worse_than_uniform (a step) for a model found worse than a uniform guess.";

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only the runs in this folder (a sweep folder: its runs) [default: every run known].
    pub dir: Option<PathBuf>,
    /// Only runs with this tag (repeat: all of them).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Only runs with this status (repeat or comma-separate: any of them).
    #[arg(
        long,
        value_name = "STATUS",
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(conelab_catalog::list::STATUSES)
    )]
    pub status: Vec<String>,
    /// Only runs whose name or folder matches this glob (`ptb-*`, `*cos*`).
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// Order of the rows.
    #[arg(long, value_enum, default_value = "started")]
    pub sort: SortArg,
    /// List again every SECONDS (default 2; 0.5 to 3600) until Ctrl-C: redrawn in place on a
    /// terminal, one table after another (each under its time) otherwise.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2",
          value_parser = watch_seconds)]
    pub watch: Option<f64>,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortArg {
    /// Newest first.
    Started,
    Name,
    Status,
    /// Best validation PPL, lowest first.
    Ppl,
    /// Furthest first.
    Step,
}

/// `--watch`'s interval: a bound either way (a busy loop, or a refresh nobody waits for).
fn watch_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.5..=3600.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} seconds: give 0.5 to 3600")),
        Err(_) => Err(format!("{s:?} is not a number of seconds")),
    }
}

pub fn exec(args: RunsArgs) -> Result<()> {
    let Some(every) = args.watch else {
        return print_stdout(&listing(&args)?);
    };
    if args.output.json("runs --watch")? {
        return Err(conelab_base::error::Invalid::new(
            "--watch redraws the table: --format json lists once (run it again)",
        )
        .into());
    }
    use std::io::IsTerminal;
    let terminal = std::io::stdout().is_terminal();
    loop {
        let table = listing(&args)?;
        let now = conelab_catalog::list::rfc3339(conelab_base::clock::unix_now());
        let head = format!("every {every} s · {now} · Ctrl-C to stop\n");
        if terminal {
            // Home and clear: the table redrawn where it was, like watch(1).
            print_stdout(&format!("\x1b[H\x1b[2J{head}{table}"))?;
        } else {
            print_stdout(&format!("{head}{table}"))?;
        }
        std::thread::sleep(std::time::Duration::from_secs_f64(every));
    }
}

/// The listing `runs` prints (the table, or JSON).
fn listing(args: &RunsArgs) -> Result<String> {
    let filter = conelab_catalog::list::Filter {
        tags: args.tags.clone(),
        status: args.status.clone(),
        name: args
            .name
            .as_deref()
            .map(conelab_catalog::list::Filter::name_glob)
            .transpose()?,
    };
    let (mut rows, place) = match &args.dir {
        Some(dir) => (
            conelab_catalog::list::list(dir)?,
            format!("under {}", dir.display()),
        ),
        None => {
            let known = conelab_catalog::index::known();
            for w in &known.warnings {
                conelab_base::stderr::say(&format!("conelab: warning: {w}"));
            }
            (
                conelab_catalog::list::rows_of(
                    &known.runs,
                    Some(&conelab_catalog::list::rows_cache()),
                ),
                "known (`conelab config show` says where runs are looked for)".to_owned(),
            )
        }
    };
    let before = rows.len();
    rows.retain(|r| filter.keeps(r));
    conelab_catalog::list::sort(
        &mut rows,
        match args.sort {
            SortArg::Started => SortBy::Started,
            SortArg::Name => SortBy::Name,
            SortArg::Status => SortBy::Status,
            SortArg::Ppl => SortBy::Ppl,
            SortArg::Step => SortBy::Step,
        },
    );
    if args.output.json("runs")? {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&rows)?));
    }
    if rows.is_empty() && before > 0 && filter.is_set() {
        return Ok(format!(
            "no runs {place} match the filters ({before} without them)\n"
        ));
    }
    if rows.is_empty() {
        return Ok(format!("no runs {place}\n"));
    }
    Ok(conelab_catalog::list::render(&rows))
}
