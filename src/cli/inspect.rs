//! `conelab inspect`: embedding metrics and neighbours of a checkpoint or a foreign matrix;
//! the browser on a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use conelab_core::run_dir::matrix::{load_matrix, read_counts_file, read_vocab_file};
use conelab_data::GroupBounds;
use conelab_metrics::Similarity;
use conelab_train::analysis::{InspectRequest, inspect, second_tier_report, stolen_report};

use super::print_stdout;

/// What `--help` says beyond the one-line summary (set on the subcommand in `cli/mod.rs`: a
/// `long_about` here is overridden by the variant's doc comment, and was never shown).
pub const LONG_ABOUT: &str = "Embedding metrics (I1, I2, singular spectrum, effective rank, cone statistics; per \
frequency group when training counts are known) and exact nearest-neighbour tables.\n\nPATH is a \
conelab run directory or step-NNNNNN folder (vocabulary, counts and groups come with it), or a \
foreign matrix: a .safetensors file (pick the tensor with --tensor) or a .npy file (float32 or \
float64, 2-D), one row per token.\n\nJSON keys (stable): n, d, i1, i2, i1_unit, i2_unit, isoscore \
(I1/I2 of the row-normalised matrix and IsoScore: scale-free, unlike i1), mean_norm, sv_norm, sv_max, \
effective_rank, mean_cos, mean_cos_to_mean, groups.{frequent,medium,rare}.{same keys + rows}, \
rare_frequent_cos, neighbors.{WORD: [{token, cosine|distance, id, group, count}]}, \
class_precision.\n\nOn a terminal (and without `--format` or --headless) it opens the browser: the \
workbench's embedding scatter, neighbour search, spectrum and group metrics; --compare OTHER puts \
a second matrix beside it.";

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A run (its folder, its name or a unique prefix, NAME#SEED: its newest checkpoint), a
    /// step-NNNNNN folder, or a foreign matrix (.safetensors, .npy)
    pub path: PathBuf,

    /// Tensor name inside a .safetensors file (e.g. embeddings.word_embeddings.weight).
    #[arg(long)]
    pub tensor: Option<String>,

    /// One token per line, line i naming row i.
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,

    /// Training count per row, one per line (or token<TAB>count); enables the frequency groups.
    #[arg(long, value_name = "FILE")]
    pub counts: Option<PathBuf>,

    /// Words whose neighbours to list, comma-separated (`#ROW` names a row by number); the same
    /// flag as `export --words` (`--neighbors` is its older name).
    #[arg(
        long,
        value_name = "W1,W2,…",
        value_delimiter = ',',
        visible_alias = "neighbors"
    )]
    pub words: Vec<String>,

    /// Neighbours per word.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,

    /// Neighbour similarity (`--metric`, its name before, still works).
    #[arg(long, alias = "metric", value_enum, default_value = "cosine")]
    pub similarity: NeighborMetric,

    /// Group boundaries for --counts (see `data stats --help`) [default: the run's, else 0.3,0.8].
    #[arg(long, value_name = "MEDIUM,RARE")]
    pub groups: Option<GroupBounds>,

    #[command(flatten)]
    pub output: super::output::OutputArgs,

    /// A second checkpoint or matrix to show beside PATH (same loading rules; --tensor, --vocab
    /// and --counts apply to PATH only; `--compare` is its older name).
    #[arg(long, alias = "compare", value_name = "OTHER")]
    pub beside: Option<PathBuf>,

    /// Also decide, for every row, whether any h makes it the argmax of h·Wᵀ (+ b where the
    /// checkpoint has an output bias) — stolen probability, Demeter et al. 2020 — exactly, on
    /// every core, with a progress bar on stderr; prints the count per group beside the cheap
    /// test's upper bound. Minutes for a 33,278 × 400 matrix; implies --headless.
    #[arg(long)]
    pub stolen: bool,

    /// Also the measures over all pairs of rows, per group (the workbench's slower tier): the
    /// share of each row's top-10 cosine neighbours in its own frequency group (Gong et al.
    /// 2018), the TwoNN intrinsic dimension (Facco et al. 2017) and the cheap upper bound on
    /// stolen rows. Needs training counts; seconds for a 33,278 × 400 matrix; implies --headless.
    #[arg(long)]
    pub second_tier: bool,

    /// Print the tables even on a terminal (no browser), as `train --headless` runs without the
    /// workbench.
    #[arg(long, visible_alias = "no-tui")]
    pub headless: bool,

    #[command(flatten)]
    pub view: conelab_run::options::ViewFlags,
}

/// `--stolen`, with a progress bar on stderr when it is a terminal.
fn stolen_with_progress(
    m: &conelab_core::run_dir::matrix::LoadedMatrix,
    bounds: GroupBounds,
) -> Result<conelab_train::analysis::StolenReport> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(m.n as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "stolen rows {bar:30} {human_pos}/{human_len} rows · {elapsed} · eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let report = stolen_report(m, bounds, &mut |done, _| {
        if let Some(b) = &bar {
            b.set_position(done as u64);
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(report)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NeighborMetric {
    Cosine,
    Euclidean,
}

pub fn exec(args: InspectArgs) -> Result<()> {
    // A path that is there is read as it is; anything else may name a run (as every other
    // command that takes a run does).
    let matrix_file = args
        .path
        .extension()
        .is_some_and(|e| e == "npy" || e == "safetensors");
    let path = if args.path.exists() || matrix_file {
        args.path.clone()
    } else {
        super::find_run(&args.path)?
    };
    let mut m = load_matrix(&path, args.tensor.as_deref())?;
    if let Some(v) = &args.vocab {
        m.tokens = Some(read_vocab_file(v, m.n)?);
    }
    if let Some(c) = &args.counts {
        m.counts = Some(read_counts_file(c, m.n)?);
    }
    let bounds_of = |m: &conelab_core::run_dir::matrix::LoadedMatrix| -> Result<GroupBounds> {
        Ok(match (args.groups, m.group_bounds) {
            (Some(b), _) => b,
            (None, Some([a, b])) => GroupBounds::new(a, b)?,
            (None, None) => GroupBounds::default(),
        })
    };
    let bounds = bounds_of(&m)?;
    if args.second_tier && m.counts.is_none() {
        anyhow::bail!("--second-tier needs training counts (a conelab run, or --counts FILE)");
    }
    let other = match &args.beside {
        Some(p) => Some(load_matrix(p, None)?),
        None => None,
    };
    let json = args.output.json("inspect")?;
    if !args.output.given()
        && !args.headless
        && !args.stolen
        && !args.second_tier
        && conelab_base::platform::drawing_terminal()
    {
        let view = super::view_options(&args.view);
        let mut sides = vec![conelab_tui::browser::Side::new(&m, bounds, view)?];
        if let Some(o) = &other {
            sides.push(conelab_tui::browser::Side::new(o, bounds_of(o)?, view)?);
        }
        conelab_tui::run_browser(conelab_tui::browser::Browser::new(sides))?;
        return Ok(());
    }
    let request = InspectRequest {
        queries: args.words.clone(),
        k: args.k,
        similarity: match args.similarity {
            NeighborMetric::Cosine => Similarity::Cosine,
            NeighborMetric::Euclidean => Similarity::Euclidean,
        },
    };
    let mut report = inspect(&m, bounds, &request)?;
    if args.second_tier {
        report.second_tier = second_tier_report(&m, bounds)?;
    }
    if args.stolen {
        report.stolen = Some(stolen_with_progress(&m, bounds)?);
    }
    let other = match &other {
        Some(o) => Some(inspect(o, bounds_of(o)?, &request)?),
        None => None,
    };
    if json {
        let value = match &other {
            Some(o) => serde_json::json!([report.to_json(), o.to_json()]),
            None => report.to_json(),
        };
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&value)?))
    } else {
        let mut text = report.render();
        if let Some(o) = &other {
            text.push('\n');
            text.push_str(&o.render());
        }
        print_stdout(&text)
    }
}
