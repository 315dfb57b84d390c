//! `conelab data stats | synth`: a corpus's statistics, the synthetic corpus.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use conelab::data::{
    Corpus, CorpusReport, CorpusSource, GroupBounds, LoadOptions, SynthConfig, SyntheticCorpus,
    VocabBuilder, thousands, zipf_exponent,
};

use super::print_stdout;

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

fn stats(args: StatsArgs) -> Result<()> {
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

fn synth(args: SynthArgs) -> Result<()> {
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

pub fn exec(command: DataCommand) -> Result<()> {
    match command {
        DataCommand::Stats(args) => stats(args),
        DataCommand::Synth(args) => synth(args),
    }
}
