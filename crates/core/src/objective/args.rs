//! The command line's objective arguments: `--objective`, `--reg NAME=WEIGHT[:OPTION…]` and
//! `--freeze GROUP[@STEP]`, parsed into the settings.

use super::*;

/// `--objective`: the data term, and for AND whether its scores are squashed: `mle`, `nce`,
/// `nce-r`, `and`, `and:squash` or `and:nosquash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossArg {
    pub kind: LossKind,
    /// AND's squashing when named (`and:squash` / `and:nosquash`); plain `and` keeps what the
    /// configuration says.
    pub squash: Option<bool>,
}

impl LossArg {
    pub fn parse(s: &str) -> Result<Self, Invalid> {
        let (name, option) = match s.split_once(':') {
            Some((n, o)) => (n.trim(), Some(o.trim())),
            None => (s.trim(), None),
        };
        let kind = [LossKind::Mle, LossKind::Nce, LossKind::NceR, LossKind::And]
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                format!("unknown objective `{name}` (expected mle, nce, nce-r, and or and:squash)")
            })?;
        let squash = match (kind, option) {
            (_, None) => None,
            (LossKind::And, Some("squash")) => Some(true),
            (LossKind::And, Some("nosquash")) => Some(false),
            (LossKind::And, Some(o)) => {
                return Err(format!(
                    "and:{o}: the only options are squash and nosquash (and:squash, and:nosquash)"
                )
                .into());
            }
            (k, Some(o)) => {
                return Err(format!("{}:{o}: {} takes no option", k.name(), k.name()).into());
            }
        };
        Ok(Self { kind, squash })
    }

    /// Sets the loss; for AND also the squashing where it is named.
    pub fn apply(self, o: &mut Objectives) {
        o.loss = self.kind;
        if let Some(squash) = self.squash {
            o.and_lm.squash = squash;
        }
    }
}

impl Objectives {
    /// Applies one `--reg` argument: `NAME=WEIGHT[:OPTION…]` or `NAME=off`. Names: cos, lap, agg
    /// (options g1, g2, static, memory=K, warm, paper), sc (options exp|poly, gamma=, c2=,
    /// c1=auto|X, orth=, spec=, sigma-lr=, sigma-adamw), dev, ul.
    pub fn apply_reg_arg(&mut self, arg: &str) -> Result<(), Invalid> {
        let (name, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("--reg {arg}: expected NAME=WEIGHT, e.g. cos=1.0"))?;
        let term = Term::parse(name.trim()).ok_or_else(|| {
            format!(
                "--reg {arg}: unknown regulariser `{name}` (expected cos, lap, agg, sc, dev or ul)"
            )
        })?;
        let mut fields = value.split(':');
        let first = fields.next().unwrap_or_default().trim();
        if first == "off" {
            *self.term_mut(term).0 = false;
            return Ok(());
        }
        let parse_num = |s: &str, what: &str| -> Result<f64, Invalid> {
            s.trim().parse::<f64>().map_err(Invalid::because(format!(
                "--reg {arg}: {what} `{s}` is not a number"
            )))
        };
        // Spectrum control spells its prior first: sc=exp:1.0 (the form) or sc=1.0:exp.
        let mut options: Vec<&str> = fields.collect();
        // AGG by the size of its rare set: agg=rare:0.2 (α is chosen by the run).
        if term == Term::Agg && first == "rare" {
            let f = options.first().copied().ok_or_else(|| {
                format!("--reg {arg}: expected agg=rare:FRACTION, e.g. agg=rare:0.2")
            })?;
            let f = parse_num(f, "fraction")?;
            if !(f > 0.0 && f < 1.0) {
                return Err(format!(
                    "--reg {arg}: the rare fraction must be between 0 and 1 (exclusive), e.g. 0.2 for the Rare group's size"
                )
                .into());
            }
            options.remove(0);
            self.agg.rare_fraction = Some(f);
        } else if term == Term::Agg {
            self.agg.rare_fraction = None;
        }
        let weight = if term == Term::Agg && self.agg.rare_fraction.is_some() && first == "rare" {
            // A placeholder until the run chooses α from its counts (a valid α meanwhile).
            self.agg.alpha
        } else if term == Term::Spectrum && (first == "exp" || first == "poly") {
            let w = options
                .first()
                .copied()
                .ok_or_else(|| format!("--reg {arg}: expected sc=exp:λ or sc=poly:λ"))?;
            options.remove(0);
            options.insert(0, first);
            parse_num(w, "weight")?
        } else {
            parse_num(first, "weight")?
        };
        {
            let (on, w) = self.term_mut(term);
            *on = true;
            *w = weight;
        }
        for opt in options {
            let opt = opt.trim();
            let (key, val) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let bad = || format!("--reg {arg}: unknown option `{opt}` for {name}");
            match (term, key, val) {
                (Term::Agg, "g1", None) => self.agg.gates = GateSet::G1,
                (Term::Agg, "g2", None) => self.agg.gates = GateSet::G2,
                (Term::Agg, "static", None) => self.agg.static_groups = true,
                (Term::Agg, "warm", None) => self.agg.counter = AggCounter::Warm,
                (Term::Agg, "paper", None) => self.agg.counter = AggCounter::Paper,
                (Term::Agg, "memory", Some(v)) => {
                    self.agg.memory = Some(v.trim().parse().map_err(Invalid::because(format!(
                        "--reg {arg}: memory `{v}` is not a whole number of updates"
                    )))?)
                }
                (Term::Spectrum, "exp", None) => self.spectrum.prior = Prior::Exponential,
                (Term::Spectrum, "poly", None) => self.spectrum.prior = Prior::Polynomial,
                (Term::Spectrum, "gamma", Some(v)) => self.spectrum.gamma = parse_num(v, "gamma")?,
                (Term::Spectrum, "c2", Some(v)) => self.spectrum.c2 = parse_num(v, "c2")?,
                (Term::Spectrum, "c1", Some(v)) => {
                    self.spectrum.c1 = SpectrumC1::parse(v).ok_or_else(|| {
                        format!("--reg {arg}: c1 `{v}` is neither auto, norm nor a number")
                    })?
                }
                (Term::Spectrum, "orth", Some(v)) => {
                    self.spectrum.lambda_orth = parse_num(v, "orth")?
                }
                (Term::Spectrum, "spec", Some(v)) => {
                    self.spectrum.lambda_spec = parse_num(v, "spec")?
                }
                (Term::Spectrum, "sigma-lr", Some(v)) => {
                    self.spectrum.sigma = SigmaUpdate::Proximal;
                    self.spectrum.sigma_lr = parse_num(v, "sigma-lr")?
                }
                (Term::Spectrum, "sigma-adamw", None) => self.spectrum.sigma = SigmaUpdate::Adamw,
                _ => return Err(bad().into()),
            }
        }
        Ok(())
    }

    /// Applies one `--freeze GROUP[@UNTIL_STEP]` argument.
    pub fn apply_freeze_arg(&mut self, arg: &str) -> Result<(), Invalid> {
        let (group, until) = match arg.split_once('@') {
            Some((g, u)) => (
                g,
                Some(u.trim().parse::<u64>().map_err(Invalid::because(format!(
                    "--freeze {arg}: `{u}` is not a step number"
                )))?),
            ),
            None => (arg, None),
        };
        let group = match group.trim() {
            "frequent" | "freq" => Group::Frequent,
            "medium" | "med" => Group::Medium,
            "rare" => Group::Rare,
            other => {
                return Err(format!(
                    "--freeze {arg}: unknown group `{other}` (expected frequent, medium or rare)"
                )
                .into());
            }
        };
        self.freeze.set(group, true);
        if until.is_some() {
            self.freeze.until = until;
        }
        Ok(())
    }
}
