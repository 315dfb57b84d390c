//! The command line: clap definitions and the dispatch to library code.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use conelab::data::{
    Corpus, CorpusReport, CorpusSource, GroupBounds, LoadOptions, SynthConfig, SyntheticCorpus,
    VocabBuilder, thousands, zipf_exponent,
};

#[derive(Debug, Parser)]
#[command(
    name = "conelab",
    version,
    about = "Train language models and watch their tied token embeddings degenerate — or not",
    long_about = "conelab trains word-level language models with tied input/output embeddings and \
measures, per frequency group (frequent / medium / rare), how the embedding matrix degenerates \
into a narrow cone.\n\nA CORPUS is a directory holding train.txt, valid.txt and test.txt (or \
WikiText's wiki.{train,valid,test}.tokens, or PTB's ptb.{train,valid,test}.txt), or the word \
`synthetic` for the built-in corpus generated in memory."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Corpora: statistics of a corpus, and the built-in synthetic generator.
    #[command(subcommand)]
    Data(DataCommand),
}

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Token counts per split, vocabulary, out-of-vocabulary words and frequency groups of a corpus.
    Stats(StatsArgs),
    /// Write the synthetic corpus (train.txt, valid.txt, test.txt, classes.tsv) to a directory.
    Synth(SynthArgs),
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Corpus directory (train.txt/valid.txt/test.txt, wiki.*.tokens or ptb.*.txt) or `synthetic`.
    pub corpus: String,

    /// Print JSON instead of a table (keys: train_tokens, valid_tokens, test_tokens, vocab_size,
    /// groups.{frequent,medium,rare}.{size,min_count,max_count}, splits, load_seconds, …).
    #[arg(long)]
    pub json: bool,

    /// Where the medium and the rare group start, as fractions of the vocabulary ranks; both
    /// strictly inside (0, 1), increasing. Group boundaries are floor(fraction × vocabulary size);
    /// tokens with equal counts on both sides of a boundary are split by rank (first occurrence).
    #[arg(long, value_name = "MEDIUM,RARE", default_value = "0.3,0.8")]
    pub groups: GroupBounds,
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Directory to write into (created if missing; existing files of the same names are replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Random seed; the same seed and settings give byte-identical files.
    #[arg(long, default_value_t = SynthConfig::default().seed)]
    pub seed: u64,

    /// Number of word types (the vocabulary adds <eos> and <unk>).
    #[arg(long, default_value_t = SynthConfig::default().vocab)]
    pub vocab: usize,

    /// Train tokens, <eos> included; valid and test get 5% of this each.
    #[arg(long, default_value_t = SynthConfig::default().tokens)]
    pub tokens: usize,

    /// Number of latent word classes (the ground truth of classes.tsv).
    #[arg(long, default_value_t = SynthConfig::default().classes)]
    pub classes: usize,

    /// Exponent s of the Zipfian unigram distribution, frequency ∝ rank^(-s).
    #[arg(long, default_value_t = SynthConfig::default().zipf, allow_negative_numbers = true)]
    pub zipf: f64,
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Data(DataCommand::Stats(args)) => data_stats(args),
        Command::Data(DataCommand::Synth(args)) => data_synth(args),
    }
}

fn data_stats(args: StatsArgs) -> Result<()> {
    let options = LoadOptions {
        groups: args.groups,
        ..LoadOptions::default()
    };
    let source = CorpusSource::parse(&args.corpus);
    let start = Instant::now();
    let corpus = Corpus::load(&source, &options)?;
    let seconds = start.elapsed().as_secs_f64();
    let bounds = [args.groups.medium_start(), args.groups.rare_start()];
    let report = CorpusReport::new(&corpus, bounds, seconds);
    if args.json {
        let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
        print_stdout(&format!("{json}\n"))
    } else {
        print_stdout(&report.render_table())
    }
}

fn data_synth(args: SynthArgs) -> Result<()> {
    let config = SynthConfig {
        seed: args.seed,
        vocab: args.vocab,
        tokens: args.tokens,
        classes: args.classes,
        zipf: args.zipf,
        ..SynthConfig::default()
    };
    let start = Instant::now();
    let synth = SyntheticCorpus::generate(&config)?;
    let generated = start.elapsed().as_secs_f64();
    synth.write_to(&args.out)?;
    let train = conelab::data::SplitText::from_bytes(
        args.out.join("train.txt"),
        synth.texts()[0].clone().into_bytes(),
        usize::MAX,
    )?;
    let (vocab, ids, _) = VocabBuilder::default().build(&train)?;
    print_stdout(&format!(
        "wrote {} (train.txt, valid.txt, test.txt, classes.tsv): {} train tokens, {} types seen of {}, {} classes, measured Zipf exponent {:.3} (target {}), generated in {:.3} s\n",
        args.out.display(),
        thousands(ids.len() as u64),
        thousands(vocab.counts().iter().filter(|&&c| c > 0).count() as u64),
        thousands(config.vocab as u64 + 2),
        config.classes,
        zipf_exponent(vocab.counts()),
        config.zipf,
        generated
    ))
}

/// Writes to stdout; a closed pipe (`conelab … | head`) is a normal end, not an error.
fn print_stdout(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}
