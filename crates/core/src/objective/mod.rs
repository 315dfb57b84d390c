//! The training objectives' settings (methods.md §3): the part of a run's objectives that is data.
//!
//! [`Objectives`] is the whole setting of a run: which loss (MLE, NCE, NCE-R, AND), which regularisers
//! are on and with what weight, which groups are frozen. It is part of the training config (TOML
//! table `[objectives]`, `--reg …` on the command line), lives in the run state while training
//! (so a resumed run continues with the settings it had), and is changed between two optimizer
//! steps by an [`ObjectiveChange`] sent through the engine's command channel. The tensor functions
//! that implement them live in the training crate, one file each.
//!
//! Here the settings themselves; their checks in [`validate`](Objectives::validate)
//! (`validate.rs`); the command line's `--objective`, `--reg` and `--freeze` in `args.rs`.

use std::fmt;

use serde::{Deserialize, Serialize};

use conelab_base::error::Invalid;

use conelab_data::Group;

mod args;
mod validate;
pub use validate::MAX_WEIGHT;

pub use args::LossArg;

/// The data term of the loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossKind {
    /// Token negative log-likelihood under the full softmax.
    #[default]
    Mle,
    /// Noise-contrastive estimation against the unigram distribution, log Z fixed at 0.
    Nce,
    /// NCE plus the (log Z)² penalty on a sampled fraction of positions (Goldberger & Melamud).
    NceR,
    /// AND (Andreas & Klein): −s[y] unnormalised plus the sampled (log Z)² penalty; optionally
    /// on squashed scores 10·tanh(s/5).
    And,
}

impl LossKind {
    pub fn name(self) -> &'static str {
        match self {
            LossKind::Mle => "mle",
            LossKind::Nce => "nce",
            LossKind::NceR => "nce-r",
            LossKind::And => "and",
        }
    }

    /// Whether the loss needs the full softmax over the vocabulary.
    pub fn is_full_softmax(self) -> bool {
        self == LossKind::Mle
    }
}

/// A regulariser that can be switched on and off and re-weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Term {
    /// Cosine regularisation (Gao et al. 2019), weight γ.
    Cos,
    /// Laplacian regularisation (Zhang et al. 2020), weight λ.
    Lap,
    /// Adaptive gradient gating (Yu et al. 2022), weight = α (occurrences per update).
    Agg,
    /// Spectrum control (Wang et al. 2020), weight = λ of the singular-value prior.
    Spectrum,
    /// (log Z)² self-normalisation penalty, weight α.
    Dev,
    /// Token-level unlikelihood (Welleck et al. 2020), weight α_UL.
    Ul,
}

impl Term {
    pub const ALL: [Term; 6] = [
        Term::Cos,
        Term::Lap,
        Term::Agg,
        Term::Spectrum,
        Term::Dev,
        Term::Ul,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Term::Cos => "cos",
            Term::Lap => "lap",
            Term::Agg => "agg",
            Term::Spectrum => "sc",
            Term::Dev => "dev",
            Term::Ul => "ul",
        }
    }

    /// The symbol the papers use for the weight, for labels ("CosReg γ=1").
    pub fn label(self) -> &'static str {
        match self {
            Term::Cos => "CosReg γ",
            Term::Lap => "LapReg λ",
            Term::Agg => "AGG α",
            Term::Spectrum => "SC λ",
            Term::Dev => "DEV α",
            Term::Ul => "UL α",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Term> {
        Term::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .or(match name {
                "spectrum" => Some(Term::Spectrum),
                "cosreg" => Some(Term::Cos),
                "laplacian" => Some(Term::Lap),
                "unlikelihood" => Some(Term::Ul),
                _ => None,
            })
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// On/off and weight of a plain additive term.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weighted {
    pub enabled: bool,
    pub weight: f64,
}

impl Weighted {
    const fn off(weight: f64) -> Self {
        Self {
            enabled: false,
            weight,
        }
    }

    /// The weight when on, 0 when off.
    pub fn active(&self) -> f64 {
        if self.enabled { self.weight } else { 0.0 }
    }
}

/// Which AGG gates act (the paper's ablations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateSet {
    #[default]
    Both,
    G1,
    G2,
}

/// How AGG's counter turns occurrences into a_v (methods.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AggCounter {
    /// The paper's Eq. 5: a_v = count_v / K, the memory starting empty — during the first K
    /// updates almost every token is rare.
    #[default]
    Paper,
    /// a_v = count_v / min(step, K): the mean occurrences per update seen so far (conelab's
    /// earlier behaviour; checkpoints written before the choice existed resume with it).
    Warm,
}

impl AggCounter {
    pub fn name(self) -> &'static str {
        match self {
            AggCounter::Paper => "paper",
            AggCounter::Warm => "warm",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AggConfig {
    pub enabled: bool,
    /// Rare iff a token's a_v (occurrences per update, see `counter`) is below α.
    pub alpha: f64,
    /// Updates remembered by the counter; `None` = updates per epoch.
    pub memory: Option<u64>,
    pub gates: GateSet,
    /// Freeze the rare set and its gates after the first epoch (ablation).
    pub static_groups: bool,
    /// a_v = count/K (`paper`, the default) or count/min(step, K) (`warm`).
    pub counter: AggCounter,
    /// `agg=rare:F`: α chosen by the run so that the rare set expected after the first epoch
    /// is the nearest achievable to the F·N rarest tokens (α does not transfer between corpora
    /// or batch sizes; a fraction does). `alpha` is then what the run chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rare_fraction: Option<f64>,
}

impl Default for AggConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            alpha: 0.03,
            memory: None,
            gates: GateSet::Both,
            static_groups: false,
            counter: AggCounter::Paper,
            rare_fraction: None,
        }
    }
}

/// Parts of the rare rows' output gradient dropped by gradient-part freezing (Yu et al. §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateParts {
    #[default]
    None,
    /// (b): the push from h at positions whose target is not rare.
    B,
    /// (c): the push from h at positions whose target is another rare token.
    C,
    /// Both (b) and (c): only the pull to h at own-target positions remains.
    Bc,
}

impl GateParts {
    pub fn drops_b(self) -> bool {
        matches!(self, GateParts::B | GateParts::Bc)
    }

    pub fn drops_c(self) -> bool {
        matches!(self, GateParts::C | GateParts::Bc)
    }

    pub fn name(self) -> &'static str {
        match self {
            GateParts::None => "none",
            GateParts::B => "b",
            GateParts::C => "c",
            GateParts::Bc => "bc",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" | "" => Some(GateParts::None),
            "b" => Some(GateParts::B),
            "c" => Some(GateParts::C),
            "bc" | "cb" | "b,c" => Some(GateParts::Bc),
            _ => None,
        }
    }
}

/// Frozen frequency groups: their rows of W stay bit-identical until unfrozen.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FreezeConfig {
    pub frequent: bool,
    pub medium: bool,
    pub rare: bool,
    /// Unfreeze every group at this step (the first step that trains them again).
    pub until: Option<u64>,
}

impl FreezeConfig {
    pub fn is_frozen(&self, group: Group) -> bool {
        match group {
            Group::Frequent => self.frequent,
            Group::Medium => self.medium,
            Group::Rare => self.rare,
        }
    }

    pub fn set(&mut self, group: Group, frozen: bool) {
        match group {
            Group::Frequent => self.frequent = frozen,
            Group::Medium => self.medium = frozen,
            Group::Rare => self.rare = frozen,
        }
    }

    pub fn any(&self) -> bool {
        self.frequent || self.medium || self.rare
    }

    /// Frozen groups at optimizer step `step` (1-based), `until` applied.
    pub fn at_step(&self, step: u64) -> [bool; 3] {
        if self.until.is_some_and(|u| step >= u) {
            return [false; 3];
        }
        [self.frequent, self.medium, self.rare]
    }
}

/// The shape the singular values are pulled toward (Wang et al. 2020 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prior {
    /// target_k = c1·exp(−c2·k^γ)
    #[default]
    Exponential,
    /// target_k = c1·k^(−γ)
    Polynomial,
}

/// c1 of the spectrum prior: σ_1 of W when control is switched on (`auto`), the scale that gives
/// the prior W's own Frobenius norm then (`norm`), or a number. In TOML and JSON: `c1 = "auto"`,
/// `c1 = "norm"` or `c1 = 3.5`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum SpectrumC1 {
    /// σ_1 at switch-on. Switched on at step 0 this clamps the spectrum, and so the row norms, at
    /// initialisation scale.
    #[default]
    Auto,
    /// The scale-matched prior (issue #60's control): c1 such that Σ_k target_k² = Σ_k σ_k² =
    /// ‖W‖²_F at switch-on, so the prior reshapes the spectrum without changing the overall
    /// scale of W — and of the logits — that the run reached by itself; taken from this run's
    /// own W, never another seed's.
    MatchNorm,
    Fixed(f64),
}

impl SpectrumC1 {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "auto" => Some(SpectrumC1::Auto),
            "norm" => Some(SpectrumC1::MatchNorm),
            x => x.parse().ok().map(SpectrumC1::Fixed),
        }
    }
}

impl fmt::Display for SpectrumC1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpectrumC1::Auto => f.write_str("auto"),
            SpectrumC1::MatchNorm => f.write_str("norm"),
            SpectrumC1::Fixed(x) => f.write_str(&num(*x)),
        }
    }
}

impl Serialize for SpectrumC1 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SpectrumC1::Auto => s.serialize_str("auto"),
            SpectrumC1::MatchNorm => s.serialize_str("norm"),
            SpectrumC1::Fixed(x) => s.serialize_f64(*x),
        }
    }
}

impl<'de> Deserialize<'de> for SpectrumC1 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(x) => Ok(SpectrumC1::Fixed(x)),
            Raw::Text(t) if t == "auto" => Ok(SpectrumC1::Auto),
            Raw::Text(t) if t == "norm" => Ok(SpectrumC1::MatchNorm),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "c1 = {t:?}: expected \"auto\", \"norm\" or a number"
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpectrumConfig {
    pub enabled: bool,
    pub prior: Prior,
    /// λ of the prior penalty Σ_k (σ_(k) − target_k)².
    pub lambda_prior: f64,
    /// λ of the Frobenius orthogonality penalty ‖UᵀU − I‖²_F + ‖VᵀV − I‖²_F.
    pub lambda_orth: f64,
    /// λ of the spectral-norm orthogonality penalty ‖UᵀU − I‖²_2 + ‖VᵀV − I‖²_2.
    pub lambda_spec: f64,
    /// Exponential prior's c2 (unused by the polynomial prior).
    pub c2: f64,
    /// The decay exponent γ.
    pub gamma: f64,
    /// The prior's scale c1: σ_1 at switch-on (`auto`) or a number.
    pub c1: SpectrumC1,
    /// How σ is updated (U and V take the run's AdamW either way).
    pub sigma: SigmaUpdate,
    /// η_σ of the proximal σ step at the schedule's full rate; each step's is η_σ · lr/base lr.
    pub sigma_lr: f64,
}

/// How spectrum control updates σ.
///
/// Wang et al. trained with SGD, where a step is proportional to the gradient, so the prior's
/// pull 2λ(σ − target) moves σ to its targets. AdamW moves every parameter by about one learning
/// rate per step whatever its gradient: σ travelled ≈ 0.3 over a 600-step run while its targets
/// were 10–40 away, and the prior never acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SigmaUpdate {
    /// A proximal gradient step: σ ← prox(σ − η_σ·∇_σ data), the prior's proximal map
    /// (x + 2η_σλ·t)/(1 + 2η_σλ) applied by rank. Stable for any η_σλ, and the prior's gradient
    /// never enters the data term's clipping norm.
    #[default]
    Proximal,
    /// σ in the AdamW group with U and V, the prior in the loss (conelab before the choice;
    /// checkpoints written then resume with it).
    Adamw,
}

impl SigmaUpdate {
    pub fn name(self) -> &'static str {
        match self {
            SigmaUpdate::Proximal => "proximal",
            SigmaUpdate::Adamw => "adamw",
        }
    }
}

impl Default for SpectrumConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            prior: Prior::Exponential,
            lambda_prior: 1.0,
            // Under AdamW the factors drift fast: with 0.1 each, ‖UᵀU − I‖_F reached 0.53 after
            // 40 steps of the test model (0.05 with 10, 28 with none); 1.0 is the middle of the
            // paper's grid {0.01, 0.1, 1, 10}.
            lambda_orth: 1.0,
            lambda_spec: 1.0,
            c2: 0.01,
            gamma: 1.0,
            c1: SpectrumC1::Auto,
            sigma: SigmaUpdate::Proximal,
            // With λ_prior = 1 a step at the full rate closes 1/6 of the distance to the targets
            // (2η_σλ = 0.2): the prior is reached within ~30 steps, and warmup eases it in.
            sigma_lr: 0.1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NceConfig {
    /// Noise samples k per batch (shared by every position of the batch).
    pub noise: usize,
    /// NCE-R: weight α of the (log Z)² penalty.
    pub alpha: f64,
    /// NCE-R: fraction γ of positions whose exact log Z is computed.
    pub fraction: f64,
}

impl Default for NceConfig {
    fn default() -> Self {
        Self {
            noise: 100,
            alpha: 1.0,
            fraction: 0.1,
        }
    }
}

/// AND (Andreas & Klein 2015): weight α and sampled fraction γ of the (log Z)² term; `squash`
/// puts every score through 10·tanh(s/5). TOML: `and = { alpha = 1.0, gamma = 0.1, squash = true }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AndConfig {
    pub alpha: f64,
    pub gamma: f64,
    pub squash: bool,
}

impl Default for AndConfig {
    fn default() -> Self {
        Self {
            alpha: 1.0,
            gamma: 0.1,
            squash: false,
        }
    }
}

impl AndConfig {
    pub fn settings(&self) -> AndSettings {
        AndSettings {
            alpha: self.alpha,
            fraction: self.gamma,
            squash: self.squash,
        }
    }
}

/// Everything that shapes the loss of a run. Defaults: plain MLE, every regulariser off with the
/// papers' default weight ready for when it is switched on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Objectives {
    pub loss: LossKind,
    pub nce: NceConfig,
    /// Written `and` in TOML and JSON (a keyword-free name in Rust).
    #[serde(rename = "and")]
    pub and_lm: AndConfig,
    pub cos: Weighted,
    pub lap: Weighted,
    pub agg: AggConfig,
    pub gate_freeze: GateParts,
    pub freeze: FreezeConfig,
    pub spectrum: SpectrumConfig,
    pub dev: Weighted,
    pub ul: Weighted,
}

impl Default for Objectives {
    fn default() -> Self {
        Self {
            loss: LossKind::Mle,
            nce: NceConfig::default(),
            and_lm: AndConfig::default(),
            cos: Weighted::off(1.0),
            lap: Weighted::off(0.001),
            agg: AggConfig::default(),
            gate_freeze: GateParts::None,
            freeze: FreezeConfig::default(),
            spectrum: SpectrumConfig::default(),
            dev: Weighted::off(1.0),
            ul: Weighted::off(1.0),
        }
    }
}

/// One change to the objectives, applied between two optimizer steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum ObjectiveChange {
    Enable {
        term: Term,
        on: bool,
    },
    Weight {
        term: Term,
        weight: f64,
    },
    Loss {
        kind: LossKind,
        /// AND only: score with 10·tanh(s/5) (absent in events written before AND existed).
        #[serde(default)]
        squash: bool,
    },
    Freeze {
        group: Group,
        frozen: bool,
    },
    GateFreeze {
        parts: GateParts,
    },
    /// Everything at once (a resumed run given new objective flags).
    Set {
        objectives: Box<Objectives>,
    },
}

impl fmt::Display for ObjectiveChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectiveChange::Enable { term, on } => {
                write!(f, "{term} {}", if *on { "on" } else { "off" })
            }
            ObjectiveChange::Weight { term, weight } => write!(f, "{term} weight {weight}"),
            ObjectiveChange::Loss { kind, squash } => {
                let option = if *squash && *kind == LossKind::And {
                    ":squash"
                } else {
                    ""
                };
                write!(f, "loss {}{option}", kind.name())
            }
            ObjectiveChange::Freeze { group, frozen } => {
                write!(f, "{} {group}", if *frozen { "freeze" } else { "unfreeze" })
            }
            ObjectiveChange::GateFreeze { parts } => write!(f, "gate-freeze {}", parts.name()),
            ObjectiveChange::Set { objectives } => write!(f, "objectives {}", objectives.label()),
        }
    }
}

impl Objectives {
    /// The weight of a term and whether it is on.
    pub fn term(&self, term: Term) -> (bool, f64) {
        match term {
            Term::Cos => (self.cos.enabled, self.cos.weight),
            Term::Lap => (self.lap.enabled, self.lap.weight),
            Term::Agg => (self.agg.enabled, self.agg.alpha),
            Term::Spectrum => (self.spectrum.enabled, self.spectrum.lambda_prior),
            Term::Dev => (self.dev.enabled, self.dev.weight),
            Term::Ul => (self.ul.enabled, self.ul.weight),
        }
    }

    pub(crate) fn term_mut(&mut self, term: Term) -> (&mut bool, &mut f64) {
        match term {
            Term::Cos => (&mut self.cos.enabled, &mut self.cos.weight),
            Term::Lap => (&mut self.lap.enabled, &mut self.lap.weight),
            Term::Agg => (&mut self.agg.enabled, &mut self.agg.alpha),
            Term::Spectrum => (&mut self.spectrum.enabled, &mut self.spectrum.lambda_prior),
            Term::Dev => (&mut self.dev.enabled, &mut self.dev.weight),
            Term::Ul => (&mut self.ul.enabled, &mut self.ul.weight),
        }
    }

    /// Applies a change if the result is valid; `group_sizes` are the frequency groups' sizes
    /// (frequent, medium, rare) so that freezing an empty group is refused.
    pub fn apply(
        &mut self,
        change: &ObjectiveChange,
        group_sizes: [usize; 3],
    ) -> Result<(), Invalid> {
        let mut next = self.clone();
        match change {
            &ObjectiveChange::Enable { term, on } => *next.term_mut(term).0 = on,
            &ObjectiveChange::Weight { term, weight } => {
                *next.term_mut(term).1 = weight;
                // A weight set by hand is an α again, not a rare fraction.
                if term == Term::Agg {
                    next.agg.rare_fraction = None;
                }
            }
            &ObjectiveChange::Loss { kind, squash } => {
                next.loss = kind;
                if kind == LossKind::And {
                    next.and_lm.squash = squash;
                }
            }
            &ObjectiveChange::Freeze { group, frozen } => {
                next.freeze.set(group, frozen);
                if !frozen && !next.freeze.any() {
                    next.freeze.until = None;
                }
            }
            &ObjectiveChange::GateFreeze { parts } => next.gate_freeze = parts,
            ObjectiveChange::Set { objectives } => next = (**objectives).clone(),
        }
        next.validate(group_sizes)?;
        *self = next;
        Ok(())
    }

    /// Whether the model's scores are 10·tanh(s/5) of the raw ones (AND with squashing in force):
    /// training and evaluation both see the squashed scores.
    pub fn squashed_scores(&self) -> bool {
        self.loss == LossKind::And && self.and_lm.squash
    }

    /// A one-line description of the active objective, for logs and table rows: `MLE`,
    /// `CosReg γ=1`, `AGG α=0.03 + freeze rare`, …
    pub fn label(&self) -> String {
        let mut parts = vec![match self.loss {
            LossKind::Mle => "MLE".to_string(),
            LossKind::Nce => format!("NCE k={}", self.nce.noise),
            LossKind::NceR => format!(
                "NCE-R k={} α={} γ={}",
                self.nce.noise,
                num(self.nce.alpha),
                num(self.nce.fraction)
            ),
            LossKind::And => format!(
                "AND α={} γ={}{}",
                num(self.and_lm.alpha),
                num(self.and_lm.gamma),
                if self.and_lm.squash { " squash" } else { "" }
            ),
        }];
        for term in Term::ALL {
            let (on, weight) = self.term(term);
            if on {
                let mut s = match (term, self.agg.rare_fraction) {
                    (Term::Agg, Some(f)) => format!("AGG rare {} α={}", num(f), num(weight)),
                    _ => format!("{}={}", term.label(), num(weight)),
                };
                if term == Term::Agg {
                    match self.agg.gates {
                        GateSet::Both => {}
                        GateSet::G1 => s.push_str(" g1 only"),
                        GateSet::G2 => s.push_str(" g2 only"),
                    }
                    if self.agg.static_groups {
                        s.push_str(" static");
                    }
                    // The paper's counter is the default: only the option is named.
                    if self.agg.counter == AggCounter::Warm {
                        s.push_str(" warm");
                    }
                }
                if term == Term::Spectrum {
                    s.push_str(match self.spectrum.prior {
                        Prior::Exponential => " exp",
                        Prior::Polynomial => " poly",
                    });
                    s.push_str(&format!(" c1={}", self.spectrum.c1));
                    if self.spectrum.sigma == SigmaUpdate::Adamw {
                        s.push_str(" σ-adamw");
                    }
                }
                parts.push(s);
            }
        }
        if self.gate_freeze != GateParts::None {
            parts.push(format!("drop ({})", self.gate_freeze.name()));
        }
        let frozen: Vec<&str> = Group::ALL
            .into_iter()
            .filter(|g| self.freeze.is_frozen(*g))
            .map(Group::name)
            .collect();
        if !frozen.is_empty() {
            let mut s = format!("freeze {}", frozen.join("+"));
            if let Some(u) = self.freeze.until {
                s.push_str(&format!(" until {u}"));
            }
            parts.push(s);
        }
        if parts.len() > 1 && parts[0] == "MLE" {
            parts.remove(0);
        }
        parts.join(" + ")
    }
}

/// A weight for labels: `1`, `0.03`, `1e-5`.
fn num(x: f64) -> String {
    if x != 0.0 && (x.abs() < 1e-3 || x.abs() >= 1e5) {
        format!("{x:e}")
    } else {
        // Four decimals at most: 0.03, 1.7067, 10.
        let s = format!("{x:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// What shapes the AND loss besides the model.
#[derive(Debug, Clone, Copy)]
pub struct AndSettings {
    pub alpha: f64,
    pub fraction: f64,
    pub squash: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: [usize; 3] = [3, 5, 2];

    #[test]
    fn records_written_before_and_existed_still_read() {
        // Events and checkpoints from before AND: a loss change without `squash`, objectives
        // without an `and` table.
        let change: ObjectiveChange =
            serde_json::from_str(r#"{"change":"loss","kind":"nce"}"#).expect("old loss change");
        assert_eq!(
            change,
            ObjectiveChange::Loss {
                kind: LossKind::Nce,
                squash: false
            }
        );
        let mut old = serde_json::to_value(Objectives::default()).expect("json");
        let table = old.as_object_mut().expect("an object");
        assert!(table.remove("and").is_some(), "the key is `and`");
        table.insert("loss".into(), "nce-r".into());
        let read: Objectives = serde_json::from_value(old).expect("old objectives");
        assert_eq!(read.loss, LossKind::NceR);
        assert_eq!(read.and_lm, AndConfig::default());
    }

    #[test]
    fn objective_arguments_name_the_squash_or_keep_the_configured_one() {
        let configured = || {
            let mut o = Objectives::default();
            o.and_lm.squash = true;
            o
        };
        let mut o = configured();
        LossArg::parse("and").expect("and").apply(&mut o);
        assert!(
            o.loss == LossKind::And && o.and_lm.squash,
            "`and` keeps squash = true"
        );
        let mut o = configured();
        LossArg::parse("and:nosquash")
            .expect("nosquash")
            .apply(&mut o);
        assert!(o.loss == LossKind::And && !o.and_lm.squash);
        let mut o = Objectives::default();
        LossArg::parse(" and:squash ")
            .expect("squash")
            .apply(&mut o);
        assert!(o.squashed_scores());
        let mut o = configured();
        LossArg::parse("nce-r").expect("nce-r").apply(&mut o);
        assert_eq!(o.loss, LossKind::NceR);
        assert!(!o.squashed_scores(), "squash only in force under AND");
        for bad in ["and:sqush", "nce:squash", "mle:x", "softmax", ""] {
            assert!(LossArg::parse(bad).is_err(), "{bad} accepted");
        }
        let e = LossArg::parse("and:sqush").expect_err("typo").to_string();
        assert!(e.contains("only options are squash and nosquash"), "{e}");
    }

    #[test]
    fn reg_arguments_parse_into_the_config() {
        let mut o = Objectives::default();
        for a in ["cos=1.0", "lap=0.001", "sc=exp:2", "dev=0.5", "ul=1"] {
            o.apply_reg_arg(a).expect(a);
        }
        assert!(o.cos.enabled && o.lap.enabled && o.spectrum.enabled && o.dev.enabled);
        assert_eq!(o.spectrum.lambda_prior, 2.0);
        assert_eq!(o.dev.weight, 0.5);
        let mut o = Objectives::default();
        o.apply_reg_arg("agg=0.05:g1:static:memory=100")
            .expect("agg");
        assert_eq!(o.agg.alpha, 0.05);
        assert_eq!(o.agg.gates, GateSet::G1);
        assert!(o.agg.static_groups);
        assert_eq!(o.agg.memory, Some(100));
        o.apply_reg_arg("sc=poly:0.1:gamma=0.7").expect("sc poly");
        assert_eq!(o.spectrum.prior, Prior::Polynomial);
        assert_eq!(o.spectrum.gamma, 0.7);
        o.apply_reg_arg("agg=off").expect("off");
        assert!(!o.agg.enabled);
        // Issue #38: AGG by the size of its rare set; α is the run's to choose.
        o.apply_reg_arg("agg=rare:0.2:warm")
            .expect("a rare fraction");
        assert!(o.agg.enabled && o.agg.counter == AggCounter::Warm);
        assert_eq!(o.agg.rare_fraction, Some(0.2));
        assert!(o.label().contains("AGG rare 0.2"), "{}", o.label());
        o.apply_reg_arg("agg=0.01").expect("an α again");
        assert_eq!((o.agg.rare_fraction, o.agg.alpha), (None, 0.01));
        // So is a weight changed from Controls, in the run and in every viewer's copy alike.
        o.apply_reg_arg("agg=rare:0.2").expect("a rare fraction");
        o.apply(
            &ObjectiveChange::Weight {
                term: Term::Agg,
                weight: 0.02,
            },
            [usize::MAX; 3],
        )
        .expect("a weight");
        assert_eq!((o.agg.rare_fraction, o.agg.alpha), (None, 0.02));
        // A fraction out of range from a file or a socket is refused as from the flag.
        let mut bad = o.clone();
        bad.agg.rare_fraction = Some(1.5);
        assert!(bad.validate([10, 10, 10]).is_err());
        for bad in [
            "agg=rare",
            "agg=rare:0",
            "agg=rare:1",
            "agg=rare:x",
            "agg=rare:-0.2",
        ] {
            assert!(o.apply_reg_arg(bad).is_err(), "{bad} must be refused");
        }
        for bad in ["cos", "foo=1", "cos=x", "agg=0.1:g3", "sc=exp"] {
            assert!(o.apply_reg_arg(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn invalid_combinations_are_refused_with_a_reason() {
        let mut o = Objectives {
            loss: LossKind::Nce,
            ..Objectives::default()
        };
        o.agg.enabled = true;
        assert!(
            o.validate(SIZES)
                .unwrap_err()
                .to_string()
                .contains("gating")
        );
        let mut o = Objectives::default();
        o.cos.weight = -1.0;
        assert!(o.validate(SIZES).unwrap_err().to_string().contains("cos"));
        let mut o = Objectives::default();
        o.agg.alpha = 0.0;
        assert!(o.validate(SIZES).unwrap_err().to_string().contains("α"));
        let mut o = Objectives::default();
        o.apply_freeze_arg("rare").expect("rare");
        assert!(
            o.validate([3, 5, 0])
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(o.validate(SIZES).is_ok());
        o.spectrum.enabled = true;
        assert!(o.validate(SIZES).is_err());
    }

    /// The bounds a flag or a socket command cannot pass (issue: `--nce-noise 10¹³` passed and
    /// asked for 40 TB at the first step): NCE's k at most N, every weight at most 10⁶.
    #[test]
    fn numbers_beyond_their_range_are_refused() {
        let vocab: usize = SIZES.iter().sum();
        let mut o = Objectives {
            loss: LossKind::Nce,
            ..Objectives::default()
        };
        o.nce.noise = vocab;
        assert!(o.validate(SIZES).is_ok(), "k = N is allowed");
        o.nce.noise = vocab + 1;
        assert!(o.validate(SIZES).is_err(), "k = N + 1 is not");
        o.nce.noise = 10_000_000_000_000;
        let why = o.validate(SIZES).unwrap_err().to_string();
        assert!(
            why.contains("at most the vocabulary size") && why.contains(&vocab.to_string()),
            "{why}"
        );
        let mut o = Objectives::default();
        o.cos.weight = MAX_WEIGHT;
        assert!(o.validate(SIZES).is_ok());
        o.cos.weight = 1e300;
        assert!(o.validate(SIZES).unwrap_err().to_string().contains("cos"));
        let mut o = Objectives::default();
        o.agg.alpha = 1e9;
        assert!(o.validate(SIZES).unwrap_err().to_string().contains("agg"));
        let mut o = Objectives::default();
        o.spectrum.c2 = f64::INFINITY;
        assert!(o.validate(SIZES).unwrap_err().to_string().contains("c2"));
        // A viewer replaying applied changes knows no group sizes (usize::MAX each): no bound
        // from the vocabulary, and no overflow summing them.
        let mut o = Objectives {
            loss: LossKind::Nce,
            ..Objectives::default()
        };
        o.nce.noise = 1_000_000;
        assert!(o.validate([usize::MAX; 3]).is_ok());
    }

    #[test]
    fn a_refused_change_leaves_the_config_untouched() {
        let mut o = Objectives::default();
        let before = o.clone();
        let err = o.apply(
            &ObjectiveChange::Weight {
                term: Term::Cos,
                weight: f64::NAN,
            },
            SIZES,
        );
        assert!(err.is_err());
        assert_eq!(o, before);
        o.apply(
            &ObjectiveChange::Enable {
                term: Term::Cos,
                on: true,
            },
            SIZES,
        )
        .expect("cos on");
        assert_eq!(o.label(), "CosReg γ=1");
    }

    #[test]
    fn freeze_until_unfreezes_at_that_step() {
        let mut o = Objectives::default();
        o.apply_freeze_arg("rare@100").expect("parses");
        assert_eq!(o.freeze.at_step(99), [false, false, true]);
        assert_eq!(o.freeze.at_step(100), [false; 3]);
        assert!(o.apply_freeze_arg("rare@x").is_err());
        assert!(o.apply_freeze_arg("huge").is_err());
    }

    #[test]
    fn the_toml_form_round_trips() {
        let mut o = Objectives::default();
        o.apply_reg_arg("agg=0.03:g2").expect("agg");
        o.apply_freeze_arg("medium").expect("medium");
        let text = toml::to_string(&o).expect("serialises");
        let back: Objectives = toml::from_str(&text).expect("parses");
        assert_eq!(back, o);
        let partial: Objectives =
            toml::from_str("[cos]\nenabled = true\nweight = 2.0\n").expect("partial");
        assert_eq!(partial.cos.weight, 2.0);
        assert!(!partial.agg.enabled);
    }

    #[test]
    fn spectrum_c1_is_auto_or_a_positive_number_on_the_command_line_and_in_toml() {
        let mut o = Objectives::default();
        o.apply_reg_arg("sc=exp:1").expect("sc");
        assert_eq!(o.spectrum.c1, SpectrumC1::Auto);
        assert_eq!(o.label(), "SC λ=1 exp c1=auto");
        o.apply_reg_arg("sc=exp:1:c1=3.5:c2=0.02:gamma=0.5")
            .expect("sc with c1");
        assert_eq!(o.spectrum.c1, SpectrumC1::Fixed(3.5));
        assert_eq!((o.spectrum.c2, o.spectrum.gamma), (0.02, 0.5));
        assert_eq!(o.label(), "SC λ=1 exp c1=3.5");
        let back: Objectives = toml::from_str(&toml::to_string(&o).expect("toml")).expect("parse");
        assert_eq!(back.spectrum.c1, SpectrumC1::Fixed(3.5));
        let auto: Objectives =
            toml::from_str("[spectrum]\nenabled = true\nc1 = \"auto\"\n").expect("auto");
        assert_eq!(auto.spectrum.c1, SpectrumC1::Auto);
        // The scale-matched control (issue #60): `norm`, on the command line and in TOML.
        let mut m = Objectives::default();
        m.apply_reg_arg("sc=exp:1:c1=norm").expect("norm");
        assert_eq!(m.spectrum.c1, SpectrumC1::MatchNorm);
        assert_eq!(m.label(), "SC λ=1 exp c1=norm");
        let back: Objectives = toml::from_str(&toml::to_string(&m).expect("toml")).expect("parse");
        assert_eq!(back.spectrum.c1, SpectrumC1::MatchNorm);
        let err = toml::from_str::<Objectives>("[spectrum]\nc1 = \"big\"\n").unwrap_err();
        assert!(err.to_string().contains("auto"), "{err}");
        for bad in ["sc=exp:1:c1=x", "sc=exp:1:c1="] {
            assert!(o.apply_reg_arg(bad).is_err(), "{bad} must be refused");
        }
        for bad in [0.0, -1.0, f64::INFINITY] {
            o.spectrum.c1 = SpectrumC1::Fixed(bad);
            assert!(
                o.validate(SIZES).unwrap_err().to_string().contains("c1"),
                "c1 = {bad}"
            );
        }
    }

    #[test]
    fn the_agg_counter_is_the_papers_unless_warm_is_asked_for() {
        let mut o = Objectives::default();
        o.apply_reg_arg("agg=0.03").expect("agg");
        assert_eq!(o.agg.counter, AggCounter::Paper);
        assert_eq!(o.label(), "AGG α=0.03");
        o.apply_reg_arg("agg=0.03:warm").expect("warm");
        assert_eq!(o.agg.counter, AggCounter::Warm);
        assert_eq!(o.label(), "AGG α=0.03 warm");
        let t: Objectives =
            toml::from_str("[agg]\nenabled = true\ncounter = \"warm\"\n").expect("toml");
        assert_eq!(t.agg.counter, AggCounter::Warm);
        // A config that does not name it gets the paper's.
        let t: Objectives = toml::from_str("[agg]\nenabled = true\n").expect("toml");
        assert_eq!(t.agg.counter, AggCounter::Paper);
    }
}
