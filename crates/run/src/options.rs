//! The options of `conelab train`: the clap definitions (parsed by the binary's command line)
//! and their checks, made before anything is created on disk.

use std::path::PathBuf;

use clap::Args;

use conelab_base::error::Invalid;

use crate::choice_arg::choice;

use conelab_core::model::{DeviceSpec, Preset};
use conelab_core::objective::LossArg;
use conelab_core::train_config::Precision;
use conelab_core::train_config::{OptimizerKind, Schedule};
use conelab_data::GroupBounds;

/// The exit statuses of a run, for `--help` and the README.
pub const EXIT_CODES_HELP: &str = "Exit status: 0 completed, or stopped from a viewer; 2 bad input; 3 diverged (NaN/inf loss, nobody resumed it); 4 failed (an internal or device error); 5 damaged data (a file the resume needs fails its checksum; nothing written); 75 stopped by SIGINT/SIGTERM after saving a checkpoint (resumable: a scheduler may requeue it); 130 a second signal before the checkpoint was saved. A viewer exits 0 when it detaches. The run ignores SIGHUP: a closed terminal or a dropped SSH connection never stops it.";

/// The longest flush interval accepted (an hour): more would make a crash lose an hour of rows.
pub const MAX_FLUSH_SECS: f64 = 3_600.0;

#[derive(Debug, Clone, Args)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct TrainOptions {
    /// Corpus directory (train.txt/valid.txt/test.txt, wiki.*.tokens or ptb.*.txt) or `synthetic`
    /// [default: synthetic].
    pub corpus: Option<String>,

    /// Model preset (the config file's [model] fields go on top of it).
    #[arg(long, value_parser = choice::<Preset>())]
    pub model: Option<Preset>,

    /// The run's name: shown in the workbench's header, by `conelab runs` and as its row label
    /// in exports (the folder keeps its timestamp). Later: `conelab rename RUN NAME`.
    #[arg(long, value_name = "NAME", help_heading = "Labels")]
    pub name: Option<String>,

    /// A tag (a single word), repeatable; later `conelab tag RUN +T -T`.
    #[arg(long = "tag", value_name = "TAG", help_heading = "Labels")]
    pub tags: Vec<String>,

    /// Free-text notes on the run; later `conelab note RUN TEXT`.
    #[arg(long, value_name = "TEXT", help_heading = "Labels")]
    pub notes: Option<String>,

    /// Device: cpu (pure-Rust burn-flex), libtorch-cpu or cuda[:N] (both need the `tch` feature)
    /// [default: cpu; on --resume the run's own].
    #[arg(long)]
    pub device: Option<DeviceSpec>,

    /// Optimizer steps [default: 2000, or the config file's].
    #[arg(long, conflicts_with = "epochs")]
    pub steps: Option<u64>,

    /// Train for this many epochs (passes over the train split) instead of --steps.
    #[arg(long, allow_negative_numbers = true)]
    pub epochs: Option<f64>,

    /// Streams per batch B [default: 16].
    #[arg(long)]
    pub batch: Option<usize>,

    /// Window length T: the Transformer's context, the LSTM's truncated-BPTT length [default: the preset's].
    #[arg(long)]
    pub bptt: Option<usize>,

    /// Peak learning rate [default: 1e-3].
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f64>,

    /// Optimizer [default: adamw].
    #[arg(long, value_parser = choice::<OptimizerKind>())]
    pub optimizer: Option<OptimizerKind>,

    /// Learning-rate schedule after the linear warm-up [default: cosine].
    #[arg(long, value_parser = choice::<Schedule>())]
    pub schedule: Option<Schedule>,

    /// Linear warm-up steps [default: 100].
    #[arg(long)]
    pub warmup: Option<u64>,

    /// Weight decay (decoupled for AdamW) [default: 0.01].
    #[arg(long, allow_negative_numbers = true)]
    pub weight_decay: Option<f64>,

    /// Clip gradients to this global L2 norm; 0 turns clipping off [default: 1.0].
    #[arg(long, allow_negative_numbers = true)]
    pub clip: Option<f64>,

    /// Arithmetic of the matrix products: fp32, or bf16 mixed precision (LibTorch only: the
    /// model's products, attention and LSTM layers in bfloat16; softmax, layer norm, the loss,
    /// gradients, AdamW, weights and checkpoints in fp32) [default: fp32].
    #[arg(long, value_parser = choice::<Precision>())]
    pub precision: Option<Precision>,

    /// Evaluate exact validation PPL (total and per group) every N steps; 0 = only at the end [default: 200].
    #[arg(long)]
    pub eval_every: Option<u64>,

    /// Evaluate the test split beside every validation evaluation, so that tables can be read on
    /// test at the best validation step (`export --step best --split test`).
    #[arg(long)]
    pub eval_test: bool,

    /// Early stopping: end the run once N validation evaluations in a row have not improved on
    /// the best (the best checkpoint is kept in best/) [default: train to --steps].
    #[arg(long, value_name = "N")]
    pub patience: Option<u64>,

    /// Write a checkpoint every N steps; 0 = only at the end [default: 500].
    #[arg(long)]
    pub checkpoint_every: Option<u64>,

    /// Keep the newest N checkpoints [default: 3].
    #[arg(long)]
    pub keep: Option<usize>,

    /// Snapshot the embedding matrix every N steps for the metrics; 0 = never [default: 50].
    #[arg(long)]
    pub snapshot_every: Option<u64>,

    /// Run directory [default: checkpoints/<model>-<corpus>-<UTC time>].
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,

    /// TOML file with [model] (preset = "…" plus any model field) and [train] (any training field).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Random seed (initialisation, dropout) [default: 1].
    #[arg(long)]
    pub seed: Option<u64>,

    /// Shuffle the training text's lines (sentences, paragraphs) by this seed before cutting it
    /// into the batch's streams, so that seeds vary the data order too [default: the text's
    /// own order].
    #[arg(long, value_name = "N")]
    pub data_seed: Option<u64>,

    /// Continue the run in RUN (a run directory, one of its step-NNNNNN folders, or a run's name as
    /// `conelab runs` lists it) exactly where its newest checkpoint left off. What can change at a step boundary may be given again and is
    /// recorded at the resume step: the objective flags, --lr, --eval-every, --checkpoint-every,
    /// --snapshot-every, --keep, --steps/--epochs, --patience, --device. The model, corpus, data,
    /// optimizer, precision and seed cannot change: given again with the run's own values they
    /// are accepted, a different value is refused (naming the flag and both values). Without a
    /// step-NNNNNN folder named, the newest checkpoint that loads and whose weights are sound is
    /// used.
    #[arg(long, value_name = "RUN")]
    pub resume: Option<PathBuf>,

    /// Where frequency groups start, as rank fractions (see `data stats --help`).
    #[arg(long, value_name = "MEDIUM,RARE", default_value = "0.3,0.8")]
    pub groups: GroupBounds,

    /// Run without the workbench, in this terminal: a progress bar on a terminal, plain log lines
    /// otherwise (the default when stdout is not a terminal). The control server runs too:
    /// `conelab attach` works on a headless run.
    #[arg(long, visible_alias = "no-tui")]
    pub headless: bool,

    /// Start the run in the background (its own session; stdout and stderr go to output.log in
    /// the run directory), print where it is and how to attach, and return at once.
    #[arg(long, conflicts_with = "headless")]
    pub detach: bool,

    /// Internal: this process is the background run started by --detach or by the workbench.
    #[arg(long, hide = true)]
    pub internal_detached: bool,

    #[command(flatten)]
    pub view: ViewFlags,

    /// Another run (its newest checkpoint) or embedding matrix whose normalised spectrum the
    /// workbench's Spectrum pane draws beside this run's (`--compare`, as it was called
    /// before `conelab compare` existed, still works).
    #[arg(long = "spectrum-beside", alias = "compare", value_name = "OTHER")]
    pub spectrum_beside: Option<PathBuf>,

    /// In plain-log mode and in train.log, a step line every N steps [default: every 1% of the
    /// run].
    #[arg(long)]
    pub log_every: Option<u64>,

    /// train.log (in the run folder, written by every run whatever its stdout): plain
    /// `key=value` lines or one JSON object per line. RUST_LOG filters it (default info;
    /// `RUST_LOG=conelab=debug` logs every step).
    #[arg(long, value_enum, default_value = "plain")]
    pub log_format: super::log::LogFormat,

    /// How often the metrics store writes its buffer to disk, in seconds (a crash loses at most
    /// this much; checkpoints always wait for it); 0 writes after every event; at most 3600.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 5.0,
        allow_negative_numbers = true
    )]
    pub store_flush_secs: f64,

    /// A shell command run once when the run ends (completed, stopped, diverged or failed), with
    /// CONELAB_RUN_NAME, CONELAB_RUN_DIR, CONELAB_STATUS, CONELAB_STEP, CONELAB_TOTAL_STEPS,
    /// CONELAB_EXIT_CODE, CONELAB_MESSAGE, CONELAB_BEST_VALID_PPL and CONELAB_SUMMARY (one line)
    /// in its environment; e.g. 'notify-send conelab "$CONELAB_SUMMARY"'. At most 30 s; it never
    /// changes the run's exit status.
    #[arg(long, value_name = "CMD")]
    pub notify: Option<String>,

    /// The data term: mle (full softmax), nce (k unigram noise samples, log Z fixed at 0), nce-r
    /// (NCE + α/γ·(log Z)² on a sampled fraction γ of positions), and (Andreas & Klein: −s[y]
    /// unnormalised + α/γ·(log Z)² on a sampled fraction γ; it trains poorly) or and:squash (AND
    /// on scores 10·tanh(s/5), which Goldberger & Melamud needed on WikiText-2; evaluation then
    /// uses the squashed scores too); plain `and` keeps the configuration's squash, and:nosquash
    /// switches it off [default: mle].
    #[arg(long, value_name = "mle|nce|nce-r|and|and:squash|and:nosquash", value_parser = LossArg::parse, help_heading = "Objectives")]
    pub objective: Option<LossArg>,

    /// Switch a regulariser on, repeatable: cos=γ (CosReg, paper 1.0); lap=λ (Laplacian, paper
    /// 0.01 PTB / 0.001 WT2 — the penalty grows with (B·T)²/N², so the papers' λ only carries
    /// over at their batch size; the step line shows its size as `penalty`);
    /// agg=α[:g1|:g2][:static][:memory=K][:warm] (adaptive gradient gating; α in occurrences per
    /// update, paper 0.03 at 32,768 tokens per update; a_v = count/K with the memory starting
    /// empty as in the paper, or count/min(step, K) with :warm); sc=exp:λ or sc=poly:λ
    /// [:gamma=γ][:c2=c][:c1=auto|norm|X][:orth=λ][:spec=λ][:sigma-lr=η|:sigma-adamw] (spectrum
    /// control; c1=auto, the default, takes σ_1 of W at switch-on — switched on at step 0 that
    /// clamps the spectrum, and so the row norms, at initialisation scale: switch it on from a
    /// trained W or give c1; c1=norm gives the prior W's own Frobenius norm at switch-on (the
    /// scale-matched control: the spectrum's shape changes, not W's scale); σ takes a proximal step of rate η (default 0.1, scaled like lr)
    /// that reaches the prior, or with :sigma-adamw AdamW's step, which barely moves it); dev=α
    /// ((log Z)²; switched on in a model without an output bias, it adds one of −mean log Z, so
    /// the NLL does not change); ul=α (unlikelihood); NAME=off switches one off.
    #[arg(long = "reg", value_name = "NAME=WEIGHT", help_heading = "Objectives")]
    pub regs: Vec<String>,

    /// Freeze the rows of a frequency group (frequent, medium, rare) bit-identically, optionally
    /// until a step: rare@2000. Repeatable.
    #[arg(long, value_name = "GROUP[@STEP]", help_heading = "Objectives")]
    pub freeze: Vec<String>,

    /// Gradient-part freezing (Yu et al. §3.3): drop part b (push from non-rare-target
    /// positions), c (push from other rare-target positions) or bc of the rare rows' gradient.
    #[arg(long, value_name = "b|c|bc", help_heading = "Objectives")]
    pub gate_freeze: Option<String>,

    /// NCE: noise samples k per batch [default: 100].
    #[arg(long, value_name = "K", help_heading = "Objectives")]
    pub nce_noise: Option<usize>,

    /// NCE-R: weight α and sampled fraction γ of its (log Z)² term [default: 1.0,0.1].
    // Hyphen values are taken so that `--nce-r -1,0.1` gets the range error, not "unexpected
    // argument".
    #[arg(
        long,
        value_name = "ALPHA,GAMMA",
        allow_hyphen_values = true,
        help_heading = "Objectives"
    )]
    pub nce_r: Option<String>,

    /// AND: weight α and sampled fraction γ of its (log Z)² term [default: 1.0,0.1; the paper:
    /// α = 1.0 PTB, 0.1 WikiText-2].
    #[arg(
        long = "and",
        value_name = "ALPHA,GAMMA",
        allow_hyphen_values = true,
        help_heading = "Objectives"
    )]
    pub and_lm: Option<String>,
}

impl TrainOptions {
    /// Checks every number before anything is created: one line naming the flag.
    pub fn validate(&self) -> Result<(), Invalid> {
        let f = self.store_flush_secs;
        if !(f.is_finite() && (0.0..=MAX_FLUSH_SECS).contains(&f)) {
            return Err(format!(
                "--store-flush-secs must be a number of seconds from 0 to {MAX_FLUSH_SECS}, got {f}"
            )
            .into());
        }
        if let Some(e) = self.epochs
            && !(e.is_finite() && e > 0.0 && e <= 1e6)
        {
            return Err(
                format!("invalid --epochs {e}: must be a positive number (at most 1e6)").into(),
            );
        }
        if self.steps == Some(0) {
            return Err("--steps must be at least 1".into());
        }
        if self.log_every == Some(0) {
            return Err("--log-every must be at least 1".into());
        }
        if self.keep == Some(0) {
            return Err("--keep must be at least 1".into());
        }
        if let Some(lr) = self.lr {
            conelab_core::train_config::check_lr(lr).map_err(|why| format!("--lr: {why}"))?;
        }
        conelab_core::labels::RunLabels::default().apply(&self.label_edit())?;
        Ok(())
    }

    /// The name, tags and notes given on the command line, as an edit of the run's labels.
    pub fn label_edit(&self) -> conelab_core::labels::LabelEdit {
        conelab_core::labels::LabelEdit {
            name: self.name.clone(),
            add: self.tags.clone(),
            remove: Vec::new(),
            notes: self.notes.clone(),
        }
    }

    /// Whether a flag given to `--resume` for what cannot change (the model, its data and its
    /// optimizer) differs from the run's own value, `spec`; `resolved` is what the flags and the
    /// config file resolve to, `corpus` the corpus they name and `run_dir` the run's folder. The
    /// same value is accepted (a requeue script that appends `--resume` to the run's own command
    /// line works); a different one is refused, naming the flag and both values.
    pub fn refuse_changes(
        &self,
        spec: &conelab_core::run_dir::RunSpec,
        resolved_model: &conelab_core::model::ModelConfig,
        resolved_train: &conelab_core::train_config::TrainConfig,
        corpus: Option<&conelab_core::run_dir::CorpusSpec>,
        run_dir: &std::path::Path,
    ) -> Result<(), Invalid> {
        let refuse = |flag: &str, given: String, own: String| -> Result<(), Invalid> {
            if given == own {
                return Ok(());
            }
            Err(format!(
                "{flag} {given} differs from the run's own {own}: the model, its data and its optimizer cannot change when a run is resumed; start a new run to change it"
            )
            .into())
        };
        // The corpus by what its files hold: the same corpus moved or copied is accepted.
        if let Some(c) = corpus
            && !spec.corpus.same_corpus(c)
        {
            let (given, own) = (c.describe(), spec.corpus.describe());
            if given == own {
                return Err(format!(
                    "CORPUS {given}: its files changed since the run started (their fingerprint \
                     differs); a resumed run must train on the same data: start a new run"
                )
                .into());
            }
            refuse("CORPUS", given, own)?;
        }
        let by_file = self.config.is_some();
        if self.model.is_some() || by_file {
            let mut model = resolved_model.clone();
            // The trainer turns an output bias on for a self-normalising objective.
            if spec.model.output_bias() {
                model.set_output_bias(true);
            }
            let flag = if by_file { "--config" } else { "--model" };
            refuse(flag, format!("{model:?}"), format!("{:?}", spec.model))?;
        } else if let Some(t) = self.bptt {
            refuse("--bptt", t.to_string(), spec.model.window().to_string())?;
        }
        let (r, own) = (resolved_train, &spec.train);
        let fields: [(&str, bool, String, String); 9] = [
            (
                "--batch",
                self.batch.is_some(),
                r.batch.to_string(),
                own.batch.to_string(),
            ),
            (
                "--optimizer",
                self.optimizer.is_some(),
                format!("{:?}", r.optimizer),
                format!("{:?}", own.optimizer),
            ),
            (
                "--schedule",
                self.schedule.is_some(),
                format!("{:?}", r.schedule),
                format!("{:?}", own.schedule),
            ),
            (
                "--warmup",
                self.warmup.is_some(),
                r.warmup.to_string(),
                own.warmup.to_string(),
            ),
            (
                "--weight-decay",
                self.weight_decay.is_some(),
                r.weight_decay.to_string(),
                own.weight_decay.to_string(),
            ),
            (
                "--clip",
                self.clip.is_some(),
                r.clip_norm.to_string(),
                own.clip_norm.to_string(),
            ),
            (
                "--precision",
                self.precision.is_some(),
                r.precision.to_string(),
                own.precision.to_string(),
            ),
            (
                "--seed",
                self.seed.is_some(),
                r.seed.to_string(),
                own.seed.to_string(),
            ),
            (
                "--data-seed",
                self.data_seed.is_some(),
                format!("{:?}", r.data_seed),
                format!("{:?}", own.data_seed),
            ),
        ];
        for (flag, given, value, own_value) in fields {
            if given || by_file {
                refuse(flag, value, own_value)?;
            }
        }
        if let Some(dir) = &self.run_dir {
            let canonical =
                |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
            refuse(
                "--run-dir",
                canonical(dir).display().to_string(),
                canonical(run_dir).display().to_string(),
            )?;
        }
        let bounds = [self.groups.medium_start(), self.groups.rare_start()];
        if self.groups != GroupBounds::default() && bounds != spec.group_bounds {
            refuse(
                "--groups",
                format!("{bounds:?}"),
                format!("{:?}", spec.group_bounds),
            )?;
        }
        Ok(())
    }

    /// The objective flags given (a resumed run applies them at its resume step).
    pub fn objective_flags_given(&self) -> bool {
        self.objective.is_some()
            || !self.regs.is_empty()
            || !self.freeze.is_empty()
            || self.gate_freeze.is_some()
            || self.nce_noise.is_some()
            || self.nce_r.is_some()
            || self.and_lm.is_some()
    }
}

/// How a view draws: the switches of every command that opens one (train, attach, compare,
/// inspect), each the same there.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ViewFlags {
    /// Draw plots with ASCII density glyphs instead of braille (fonts without braille).
    #[arg(long)]
    pub ascii: bool,

    /// Leave the mouse to the terminal, so text can be selected (over SSH too); `M` switches
    /// capture on and off in a view.
    #[arg(long)]
    pub no_mouse: bool,

    /// Colours for a dark or a light terminal background (16 ANSI colours either way, true colour
    /// where the terminal has it) [default: the config file's theme, else dark].
    #[arg(long, value_enum)]
    pub theme: Option<Theme>,

    /// Colour: auto (unless NO_COLOR is set), always (even then), never (glyphs alone)
    /// [default: the config file's colour, else auto].
    #[arg(long, value_enum, value_name = "WHEN")]
    pub color: Option<ColorWhen>,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

/// `--theme`: colours for a dark or a light terminal background.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Theme {
    #[default]
    Dark,
    Light,
}
