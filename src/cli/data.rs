//! `conelab data stats | synth | baseline | bpe`: a corpus's statistics (a language-model corpus
//! or a parallel one), the synthetic corpora, its reference n-gram models per group, byte-pair
//! re-segmentation (joint over both sides of a parallel corpus).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use conelab_data::{
    Corpus, CorpusReport, CorpusSource, GroupBounds, LoadOptions, ParallelCorpus, ParallelOptions,
    ParallelReport, SPLIT_FILE_NAMES, SynthConfig, SynthMtConfig, SyntheticCorpus, SyntheticMt,
    VocabBuilder, thousands, zipf_exponent,
};

use super::print_stdout;

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Token counts per split, vocabulary, out-of-vocabulary words and frequency groups of a corpus
    /// (of a parallel corpus, per side, with the joint vocabulary and the Source-only group).
    Stats(StatsArgs),
    /// Write the synthetic corpus (train.txt, valid.txt, test.txt, classes.tsv) to a directory;
    /// with --mt the synthetic parallel corpus (train.xx, train.yy, …).
    Synth(SynthArgs),
    /// The corpus's reference models per frequency group on valid and test: a unigram model and
    /// an interpolated modified Kneser–Ney trigram trained on train with the runs' vocabulary
    /// (methods.md §2). A language model's context gain in a group is ln(PPL_KN3 / PPL). Cached
    /// in $XDG_CACHE_HOME/conelab/baselines.
    Baseline(BaselineArgs),
    /// Re-segment a corpus into byte-pair pieces (Sennrich et al. 2016): merges learnt on the
    /// train split, applied to every split, pieces written whitespace-separated with every piece
    /// but a word's last ending in `@@` (`low@@ er`). The merges go to bpe-merges.txt. Prints the
    /// new vocabulary and the Rare group's median training count. A parallel corpus takes
    /// --joint: one BPE learnt on both sides' train splits, applied to all six files.
    Bpe(BpeArgs),
}

#[derive(Debug, Args)]
pub struct BpeArgs {
    /// Corpus directory or name (found under the data roots), or `synthetic`.
    pub corpus: String,

    /// Number of merges to learn (more merges, longer pieces, rarer types).
    #[arg(long, default_value_t = 8000)]
    pub merges: usize,

    /// Directory to write train.txt, valid.txt, test.txt and bpe-merges.txt into (created; if it
    /// exists it must be empty).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Where the medium and the rare group start, for the printed summary.
    #[arg(long, value_name = "MEDIUM,RARE", default_value = "0.3,0.8")]
    pub groups: GroupBounds,

    /// A parallel corpus: one BPE learnt on both sides' train splits and applied to all six files
    /// (the papers' shared vocabulary for one embedding matrix); required for a parallel corpus.
    #[arg(long)]
    pub joint: bool,
}

#[derive(Debug, Args)]
pub struct BaselineArgs {
    /// Corpus directory or name (found under the data roots), or `synthetic`.
    pub corpus: String,

    #[command(flatten)]
    pub output: super::output::OutputArgs,

    /// Where the medium and the rare group start, as for `data stats` (and `train --groups`).
    #[arg(long, value_name = "MEDIUM,RARE", default_value = "0.3,0.8")]
    pub groups: GroupBounds,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Corpus directory (train.txt/valid.txt/test.txt, wiki.*.tokens or ptb.*.txt), a parallel
    /// corpus (train.XX/train.YY, valid.*, test.* for two language codes), `synthetic` or
    /// `synthetic-mt`.
    pub corpus: String,

    /// A parallel corpus's direction, SRC-TGT (`en-de`): the target side decides the groups.
    #[arg(long, value_name = "SRC-TGT")]
    pub pair: Option<String>,

    #[command(flatten)]
    pub output: super::output::OutputArgs,

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

    /// Write `synthetic-mt` instead, the built-in parallel corpus: train.xx/train.yy,
    /// valid.*, test.* (direction xx-yy; the target is each source word through a dictionary,
    /// adjacent words swapped). Takes --seed; its other settings are the built-in ones.
    #[arg(long)]
    pub mt: bool,
}

/// A parallel corpus named on the command line: `synthetic-mt`, or a folder whose files are
/// `SPLIT.CODE` for two or more codes and none of a language-model corpus's names.
enum ParallelSource {
    Synthetic,
    Dir(PathBuf),
}

fn parallel_source(arg: &str) -> Option<ParallelSource> {
    if arg == "synthetic-mt" {
        return Some(ParallelSource::Synthetic);
    }
    let CorpusSource::Dir(dir) = CorpusSource::parse(arg) else {
        return None;
    };
    let word_level = SPLIT_FILE_NAMES
        .iter()
        .flat_map(|(_, names)| names.iter())
        .any(|n| dir.join(n).is_file());
    let codes = ParallelCorpus::detect(&dir).ok()?;
    (!word_level && codes.len() >= 2).then_some(ParallelSource::Dir(dir))
}

/// The parallel corpus of `source` in the direction `pair` (synthetic-mt has one: xx-yy).
fn load_parallel(
    source: &ParallelSource,
    pair: Option<&str>,
    groups: GroupBounds,
) -> Result<ParallelCorpus> {
    let options = ParallelOptions {
        groups,
        ..ParallelOptions::default()
    };
    Ok(match source {
        ParallelSource::Synthetic => {
            let synth = SyntheticMt::generate(&SynthMtConfig::default())?;
            if let Some(p) = pair
                && p != synth_mt_pair()
            {
                return Err(conelab_base::error::Invalid::new(format!(
                    "--pair {p}: synthetic-mt has one direction, {}",
                    synth_mt_pair()
                ))
                .into());
            }
            synth.into_corpus(&options)?
        }
        ParallelSource::Dir(dir) => ParallelCorpus::load(dir, pair, &options)?,
    })
}

/// The parallel corpus `arg` names (a folder, a name under the data roots, `synthetic-mt`) in the
/// direction `pair`; anything else is one line of bad input.
pub fn parallel_corpus(arg: &str, pair: Option<&str>) -> Result<ParallelCorpus> {
    match parallel_source(arg) {
        Some(source) => load_parallel(&source, pair, GroupBounds::default()),
        None => Err(conelab_base::error::Invalid::new(format!(
            "{arg} is not a parallel corpus (train.XX/train.YY, valid.*, test.* for two language codes) nor synthetic-mt"
        ))
        .into()),
    }
}

fn synth_mt_pair() -> String {
    format!(
        "{}-{}",
        conelab_data::synthetic_mt::SOURCE_CODE,
        conelab_data::synthetic_mt::TARGET_CODE
    )
}

fn stats(args: StatsArgs) -> Result<()> {
    let json = args.output.json("data stats")?;
    if let Some(parallel) = parallel_source(&args.corpus) {
        let start = Instant::now();
        let corpus = load_parallel(&parallel, args.pair.as_deref(), args.groups)?;
        let report = ParallelReport::new(&corpus, start.elapsed().as_secs_f64());
        return if json {
            let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
            print_stdout(&format!("{json}\n"))
        } else {
            print_stdout(&report.render_table())
        };
    }
    if let Some(pair) = &args.pair {
        return Err(conelab_base::error::Invalid::new(format!(
            "--pair {pair}: {} is not a parallel corpus (train.XX/train.YY for two language codes); --pair applies to those",
            args.corpus
        ))
        .into());
    }
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
    if json {
        let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
        print_stdout(&format!("{json}\n"))
    } else {
        print_stdout(&report.render_table())
    }
}

fn synth(args: SynthArgs) -> Result<()> {
    if args.mt {
        let config = SynthMtConfig {
            seed: args.seed,
            ..SynthMtConfig::default()
        };
        let start = Instant::now();
        let synth = SyntheticMt::generate(&config)?;
        let generated = start.elapsed().as_secs_f64();
        synth.write_to(&args.out)?;
        return print_stdout(&format!(
            "wrote {} (train, valid and test .xx/.yy: {}): {} / {} / {} sentence pairs, {} source types, generated in {:.3} s; train it with --pair {}\n",
            args.out.display(),
            synth.describe(),
            thousands(config.train as u64),
            thousands(config.valid as u64),
            thousands(config.test as u64),
            thousands(config.vocab as u64),
            generated,
            synth_mt_pair()
        ));
    }
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
    let train = conelab_data::SplitText::from_bytes(
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

fn baseline(args: BaselineArgs) -> Result<()> {
    let json = args.output.json("data baseline")?;
    use conelab_core::baseline::{self, Cached};
    let options = LoadOptions {
        groups: args.groups,
        ..LoadOptions::default()
    };
    let corpus = Corpus::load(&CorpusSource::parse(&args.corpus), &options)?;
    let cache = conelab_base::settings::current().cache_dir.value.clone();
    let (reference, cached) = baseline::reference(&corpus, &cache)?;
    if let Cached::NotStored(why) = &cached {
        eprintln!("conelab: warning: the results are not cached ({why})");
    }
    if json {
        let json = serde_json::to_string_pretty(&reference).context("serialising the models")?;
        return print_stdout(&format!("{json}\n"));
    }
    let mut out = format!(
        "reference models of {}: {} train tokens, vocabulary {}\n\n",
        reference.corpus,
        thousands(reference.train_tokens as u64),
        thousands(reference.vocab as u64)
    );
    out.push_str(&format!(
        "{:<6} {:<8} {:>10} {:>10} {:>10} {:>10}\n",
        "split", "model", "Freq PPL", "Med PPL", "Rare PPL", "Total PPL"
    ));
    let cell = |v: f64| {
        if v.is_finite() {
            format!("{v:.1}")
        } else {
            "–".into()
        }
    };
    for s in &reference.splits {
        for (name, p) in [("unigram", &s.unigram), ("KN-3", &s.kn3)] {
            out.push_str(&format!(
                "{:<6} {:<8} {:>10} {:>10} {:>10} {:>10}\n",
                s.split,
                name,
                cell(p.groups[0]),
                cell(p.groups[1]),
                cell(p.groups[2]),
                cell(p.total)
            ));
        }
    }
    let levels: Vec<String> = ["unigram", "bigram", "trigram"]
        .iter()
        .zip(reference.discounts)
        .zip(reference.discount_kinds)
        .map(|((level, d), kind)| {
            format!(
                "{level} {:.3}/{:.3}/{:.3} ({})",
                d[0],
                d[1],
                d[2],
                kind.name()
            )
        })
        .collect();
    out.push_str(&format!(
        "\nKN-3: interpolated modified Kneser–Ney (Chen & Goodman 1998), one stream across <eos>; discounts D1/D2/D3+ {}\n",
        levels.join(", ")
    ));
    out.push_str(&match cached {
        Cached::Hit(f) => format!("read from the cache {}\n", f.display()),
        Cached::Stored(f) => format!(
            "computed in {:.1} s, cached in {}\n",
            reference.seconds,
            f.display()
        ),
        Cached::NotStored(_) => format!("computed in {:.1} s\n", reference.seconds),
    });
    print_stdout(&out)
}

pub fn exec(command: DataCommand) -> Result<()> {
    match command {
        DataCommand::Stats(args) => stats(args),
        DataCommand::Synth(args) => synth(args),
        DataCommand::Baseline(args) => baseline(args),
        DataCommand::Bpe(args) => bpe(args),
    }
}

fn bpe(args: BpeArgs) -> Result<()> {
    use conelab_base::error::Invalid;
    use conelab_data::bpe::Merges;
    let start = Instant::now();
    // Everything is checked before anything is written.
    let nonempty = std::fs::read_dir(&args.out).is_ok_and(|mut d| d.next().is_some());
    if nonempty || args.out.is_file() {
        return Err(Invalid::new(format!(
            "{}: exists and is not an empty folder (bpe writes a new corpus)",
            args.out.display()
        ))
        .into());
    }
    if let Some(parallel) = parallel_source(&args.corpus) {
        return joint_bpe(&args, &parallel, start);
    }
    if args.joint {
        return Err(Invalid::new(format!(
            "--joint: {} is not a parallel corpus (train.XX/train.YY for two language codes)",
            args.corpus
        ))
        .into());
    }
    let source = CorpusSource::parse(&args.corpus);
    let texts = Corpus::read_texts(&source, &LoadOptions::default())?;
    for text in &texts {
        if let Some((line, word)) = conelab_data::bpe::first_marked_word(text.lines()) {
            return Err(Invalid::new(format!(
                "{}: line {line}: the word {word:?} ends with `@@`, the mark bpe puts on a continued piece: the segmented corpus could not be joined back (is it segmented already?)",
                text.path().display()
            ))
            .into());
        }
    }
    let progress = super::progress::Progress::new("learning merges");
    let wanted = args.merges as u64;
    let merges = Merges::learn_reporting(texts[0].lines(), args.merges, &mut |done| {
        progress.at("learning merges", done as u64, wanted)
    })
    .map_err(|e| Invalid::because(args.corpus.clone())(e))?;
    let mut cache = Default::default();
    let segmented: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            progress.at("segmenting splits", i as u64, texts.len() as u64);
            merges.apply_text(t.lines(), &mut cache)
        })
        .collect();
    drop(progress);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    for (name, text) in ["train.txt", "valid.txt", "test.txt"]
        .iter()
        .zip(&segmented)
        .chain([(&"bpe-merges.txt", &merges.to_text())])
    {
        let path = args.out.join(name);
        conelab_base::atomic::write_file(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // The new corpus as every command will read it.
    let corpus = Corpus::load(
        &CorpusSource::Dir(args.out.clone()),
        &LoadOptions {
            groups: args.groups,
            ..LoadOptions::default()
        },
    )?;
    let counts = corpus.vocab().counts();
    let median = |range: std::ops::Range<usize>| {
        let mut c: Vec<u64> = counts[range].to_vec();
        c.sort_unstable();
        c.get(c.len() / 2).copied().unwrap_or(0)
    };
    let rare = corpus.groups().range(conelab_data::Group::Rare);
    let words = texts[0].word_count();
    // The split's tokens less its <eos>, one a line.
    let pieces = corpus.stats(conelab_data::Split::Train).tokens - texts[0].lines().count();
    print_stdout(&format!(
        "wrote {} (train.txt, valid.txt, test.txt, bpe-merges.txt) in {:.1} s: {} merges, {} types (vocabulary with <eos> and <unk>), {} train pieces for {} words ({:.2} a word); Rare group: {} types, median training count {} (min {}, max {})\n",
        args.out.display(),
        start.elapsed().as_secs_f64(),
        thousands(merges.len() as u64),
        thousands(corpus.vocab().len() as u64),
        thousands(pieces as u64),
        thousands(words as u64),
        pieces as f64 / words.max(1) as f64,
        thousands(rare.len() as u64),
        thousands(median(rare.clone())),
        thousands(counts[rare.clone()].iter().copied().min().unwrap_or(0)),
        thousands(counts[rare].iter().copied().max().unwrap_or(0)),
    ))
}

/// `data bpe --joint` on a parallel corpus: merges learnt on both sides' train splits together,
/// applied to every split of both sides, written under the same names with `bpe-merges.txt`.
fn joint_bpe(args: &BpeArgs, parallel: &ParallelSource, start: Instant) -> Result<()> {
    use conelab_base::error::Invalid;
    use conelab_data::bpe::{Merges, first_marked_word};
    let ParallelSource::Dir(dir) = parallel else {
        return Err(Invalid::new(
            "synthetic-mt is generated in memory: write it with `conelab data synth --mt --out DIR`, then segment DIR",
        )
        .into());
    };
    if !args.joint {
        return Err(Invalid::new(format!(
            "{}: a parallel corpus is segmented with one BPE over both sides: give --joint",
            dir.display()
        ))
        .into());
    }
    let codes = ParallelCorpus::detect(dir)?;
    let [a, b] = codes.as_slice() else {
        return Err(Invalid::new(format!(
            "{}: joint BPE segments a pair of languages, and this folder has {} codes ({})",
            dir.display(),
            codes.len(),
            codes.join(", ")
        ))
        .into());
    };
    let nonempty = std::fs::read_dir(&args.out).is_ok_and(|mut d| d.next().is_some());
    if nonempty || args.out.is_file() {
        return Err(Invalid::new(format!(
            "{}: exists and is not an empty folder (bpe writes a new corpus)",
            args.out.display()
        ))
        .into());
    }
    // Every file read (and checked) before anything is learnt or written.
    let mut texts = Vec::new();
    for split in conelab_data::Split::ALL {
        for code in [a, b] {
            let path = dir.join(format!("{split}.{code}"));
            let text = conelab_data::SplitText::read(&path, conelab_data::DEFAULT_MAX_LINE_BYTES)?;
            if let Some((line, word)) = first_marked_word(text.lines()) {
                return Err(Invalid::new(format!(
                    "{}: line {line}: the word {word:?} ends with `@@`, the mark bpe puts on a continued piece: the segmented corpus could not be joined back (is it segmented already?)",
                    path.display()
                ))
                .into());
            }
            texts.push((format!("{split}.{code}"), text));
        }
    }
    let progress = super::progress::Progress::new("learning merges");
    let wanted = args.merges as u64;
    // texts[0] and texts[1] are the two sides' train splits.
    let train_lines = texts[0].1.lines().chain(texts[1].1.lines());
    let merges = Merges::learn_reporting(train_lines, args.merges, &mut |done| {
        progress.at("learning merges", done as u64, wanted)
    })
    .map_err(|e| Invalid::because(dir.display().to_string())(e))?;
    let mut cache = Default::default();
    let segmented: Vec<(String, String)> = texts
        .iter()
        .enumerate()
        .map(|(i, (name, t))| {
            progress.at("segmenting files", i as u64, texts.len() as u64);
            (name.clone(), merges.apply_text(t.lines(), &mut cache))
        })
        .collect();
    drop(progress);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    for (name, text) in segmented
        .iter()
        .map(|(n, t)| (n.as_str(), t))
        .chain([("bpe-merges.txt", &merges.to_text())])
    {
        let path = args.out.join(name);
        conelab_base::atomic::write_file(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // The new corpus as `train` will read it (either direction has the one joint vocabulary).
    let corpus = ParallelCorpus::load(
        &args.out,
        Some(&format!("{a}-{b}")),
        &ParallelOptions {
            groups: args.groups,
            ..ParallelOptions::default()
        },
    )?;
    let train = corpus.stats(conelab_data::Split::Train);
    let side = |s: &conelab_data::SideStats, words: usize| {
        format!(
            "{} pieces for {} words ({:.2} a word)",
            thousands(s.words as u64),
            thousands(words as u64),
            s.words as f64 / words.max(1) as f64
        )
    };
    print_stdout(&format!(
        "wrote {} (the six split files and bpe-merges.txt) in {:.1} s: {} merges learnt on both sides' train splits, a joint vocabulary of {} types; train.{a}: {}; train.{b}: {}\n",
        args.out.display(),
        start.elapsed().as_secs_f64(),
        thousands(merges.len() as u64),
        thousands(corpus.vocab().len() as u64),
        side(&train.source, texts[0].1.word_count()),
        side(&train.target, texts[1].1.word_count()),
    ))
}
