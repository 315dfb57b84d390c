//! What a command or a resume changed in a run, typed: the new learning rate and whether the
//! schedule stopped, the objectives before and after, a setting's old and new value. A viewer
//! reads these fields; the words the log, the store's events table and `conelab export` show
//! are written from them here ([`Change::before_text`], [`ConfigChange::after_text`]), and read
//! back into them here too — the store's replay of a run's history and a checkpoint's command
//! log from before changes were typed — so the words have one writer and one reader.

use serde::{Deserialize, Serialize};

use crate::events::Command;
use crate::objective::Objectives;

/// What an applied command changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Change {
    /// The run paused.
    Paused,
    /// The run took up training again.
    Resumed,
    /// The run ends after this step (`save`: with a checkpoint).
    Stopping { save: bool },
    /// A checkpoint was asked for.
    Checkpoint,
    /// The learning rate, from the rate in force to the one set; `schedule_off_from`: the step
    /// from which the schedule no longer moves it (absent when no schedule was running).
    Lr {
        #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
        before: f64,
        #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
        after: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schedule_off_from: Option<u64>,
    },
    /// The objectives in force before and after.
    Objectives {
        before: Box<ObjectivesInForce>,
        after: Box<ObjectivesInForce>,
    },
    /// The same command as the one applied just before it at the same step: nothing changed.
    Unchanged,
    /// A change recorded before changes were typed (a checkpoint's command log written by an
    /// earlier conelab), in its words: the objectives it set cannot be read back from them.
    Recorded { before: String, after: String },
}

/// What the words of a coalesced command say.
const UNCHANGED: &str = "unchanged (the same command was just applied)";
/// The words after an lr change that stopped the schedule, before the step.
const SCHEDULE_OFF: &str = " (schedule off from step ";

impl Change {
    /// The state before, in the words of the log and the store (`lr=1.000000e-3`, `running`,
    /// `CosReg γ=1`).
    pub fn before_text(&self) -> String {
        match self {
            Change::Paused | Change::Stopping { .. } => "running".into(),
            Change::Resumed => "paused".into(),
            Change::Checkpoint => String::new(),
            Change::Lr { before, .. } => format!("lr={before:.6e}"),
            Change::Objectives { before, .. } => before.to_string(),
            Change::Unchanged => UNCHANGED.into(),
            Change::Recorded { before, .. } => before.clone(),
        }
    }

    /// The state after, in the same words (`lr=1.000000e-4 (schedule off from step 1048)`).
    pub fn after_text(&self) -> String {
        match self {
            Change::Paused => "paused".into(),
            Change::Resumed => "running".into(),
            Change::Stopping { save } => format!("stopped (save={save})"),
            Change::Checkpoint => "checkpoint".into(),
            Change::Lr {
                after,
                schedule_off_from: Some(step),
                ..
            } => format!("lr={after:.6e}{SCHEDULE_OFF}{step})"),
            Change::Lr { after, .. } => format!("lr={after:.6e}"),
            Change::Objectives { after, .. } => after.to_string(),
            Change::Unchanged => UNCHANGED.into(),
            Change::Recorded { after, .. } => after.clone(),
        }
    }

    /// An objective change that leaves what is in force reading the same (a regulariser
    /// switched off that was off, a weight given to one that is off: no "MLE → MLE").
    pub fn changes_nothing(&self) -> bool {
        match self {
            Change::Objectives { before, after } => before.to_string() == after.to_string(),
            Change::Unchanged => true,
            _ => false,
        }
    }

    /// The change `command` made, read back from the words it was recorded in (a command log
    /// or a store written before changes were typed, the store's `before`/`after` columns).
    /// Only an objective change keeps just its words ([`Change::Recorded`]).
    pub fn from_words(command: &Command, before: &str, after: &str, coalesced: bool) -> Self {
        if coalesced {
            return Change::Unchanged;
        }
        match command {
            Command::Pause => Change::Paused,
            Command::Resume => Change::Resumed,
            Command::Stop { save } => Change::Stopping { save: *save },
            Command::SaveCheckpoint => Change::Checkpoint,
            Command::SetLr { lr } => Change::lr_from_words(before, after).unwrap_or(Change::Lr {
                before: f64::NAN,
                after: *lr,
                schedule_off_from: None,
            }),
            Command::Objective { .. } => Change::Recorded {
                before: before.into(),
                after: after.into(),
            },
        }
    }

    /// An lr change from its words, `lr=X` and `lr=Y[ (schedule off from step N)]`; `None`
    /// when they are not those words.
    pub fn lr_from_words(before: &str, after: &str) -> Option<Self> {
        let rate = |w: &str| w.strip_prefix("lr=")?.parse::<f64>().ok();
        let (after, schedule_off_from) = match after.split_once(SCHEDULE_OFF) {
            Some((rate_words, rest)) => (rate_words, Some(rest.strip_suffix(')')?.parse().ok()?)),
            None => (after, None),
        };
        Some(Change::Lr {
            before: rate(before)?,
            after: rate(after)?,
            schedule_off_from,
        })
    }
}

/// The objectives in force, as a change records them: the objectives, and what the run chose
/// for them (spectrum control's c1 when it was switched on, AGG's α for a rare fraction).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectivesInForce {
    pub objectives: Objectives,
    /// Spectrum control's c1, while it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spectrum_c1: Option<f64>,
    /// AGG's α chosen for `agg=rare:F`, and what it selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rare_alpha: Option<RareAlpha>,
}

/// Objectives with nothing chosen for them (no spectrum control, no rare fraction).
impl From<Objectives> for ObjectivesInForce {
    fn from(objectives: Objectives) -> Self {
        Self {
            objectives,
            spectrum_c1: None,
            rare_alpha: None,
        }
    }
}

/// The α `agg=rare:F` chose (methods.md §3) and the rare set it selects.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RareAlpha {
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub alpha: f64,
    /// Tokens expected rare once the counter's memory is full.
    pub expected: usize,
    /// F·N, rounded: what was asked for.
    pub target: usize,
    /// N, the vocabulary's size.
    pub vocab: usize,
}

/// The objectives' label, and under spectrum control the prior's constants, under AGG its
/// counter and the rare set α chose: `CosReg γ=1`, `MLE + SC … (c1=2.000000, c2=…, γ=…)`.
impl std::fmt::Display for ObjectivesInForce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.objectives;
        f.write_str(&o.label())?;
        if let Some(c1) = self.spectrum_c1 {
            write!(
                f,
                " (c1={c1:.6}, c2={}, γ={})",
                o.spectrum.c2, o.spectrum.gamma
            )?;
        }
        if o.agg.enabled {
            // The label names only the non-default counter; the record always says which.
            write!(f, " (AGG counter {})", o.agg.counter.name())?;
            if let Some(r) = &self.rare_alpha {
                write!(
                    f,
                    " (α={:.4e}: {} of {} tokens rare after the first epoch, {} asked)",
                    r.alpha, r.expected, r.vocab, r.target
                )?;
            }
        }
        Ok(())
    }
}

/// A setting a resume changed (`--steps`, `--eval-every`, `--device`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "key", rename_all = "snake_case")]
pub enum ConfigChange {
    Device {
        before: String,
        after: String,
    },
    EvalEvery {
        before: u64,
        after: u64,
    },
    CheckpointEvery {
        before: u64,
        after: u64,
    },
    SnapshotEvery {
        before: u64,
        after: u64,
    },
    Keep {
        before: u64,
        after: u64,
    },
    Steps {
        before: u64,
        after: u64,
    },
    /// Early stopping's patience in evaluations; `None`: off.
    Patience {
        before: Option<u64>,
        after: Option<u64>,
    },
}

impl ConfigChange {
    /// The setting's name in the log and the store (`eval_every`).
    pub fn key(&self) -> &'static str {
        match self {
            ConfigChange::Device { .. } => "device",
            ConfigChange::EvalEvery { .. } => "eval_every",
            ConfigChange::CheckpointEvery { .. } => "checkpoint_every",
            ConfigChange::SnapshotEvery { .. } => "snapshot_every",
            ConfigChange::Keep { .. } => "keep",
            ConfigChange::Steps { .. } => "steps",
            ConfigChange::Patience { .. } => "patience",
        }
    }

    /// The old value in the words of the log and the store.
    pub fn before_text(&self) -> String {
        self.texts().0
    }

    /// The new value in the words of the log and the store.
    pub fn after_text(&self) -> String {
        self.texts().1
    }

    /// Whether it changed anything.
    pub fn is_change(&self) -> bool {
        let (before, after) = self.texts();
        before != after
    }

    fn texts(&self) -> (String, String) {
        let patience = |p: &Option<u64>| p.map_or_else(|| "off".to_owned(), |p| p.to_string());
        match self {
            ConfigChange::Device { before, after } => (before.clone(), after.clone()),
            ConfigChange::EvalEvery { before, after }
            | ConfigChange::CheckpointEvery { before, after }
            | ConfigChange::SnapshotEvery { before, after }
            | ConfigChange::Keep { before, after }
            | ConfigChange::Steps { before, after } => (before.to_string(), after.to_string()),
            ConfigChange::Patience { before, after } => (patience(before), patience(after)),
        }
    }

    /// The change of `key` from its words (the store's `config` rows); `None` for a key or
    /// words this version does not know.
    pub fn from_words(key: &str, before: &str, after: &str) -> Option<Self> {
        let count = |w: &str| w.parse::<u64>().ok();
        let patience = |w: &str| match w {
            "off" => Some(None),
            n => count(n).map(Some),
        };
        let counts = || Some((count(before)?, count(after)?));
        Some(match key {
            "device" => ConfigChange::Device {
                before: before.into(),
                after: after.into(),
            },
            "eval_every" => {
                counts().map(|(before, after)| ConfigChange::EvalEvery { before, after })?
            }
            "checkpoint_every" => {
                counts().map(|(before, after)| ConfigChange::CheckpointEvery { before, after })?
            }
            "snapshot_every" => {
                counts().map(|(before, after)| ConfigChange::SnapshotEvery { before, after })?
            }
            "keep" => counts().map(|(before, after)| ConfigChange::Keep { before, after })?,
            "steps" => counts().map(|(before, after)| ConfigChange::Steps { before, after })?,
            "patience" => ConfigChange::Patience {
                before: patience(before)?,
                after: patience(after)?,
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objective::{ObjectiveChange, Term};

    /// The words are those the trainer wrote before changes were typed (the store's columns of
    /// every run so far), and they read back as the change.
    #[test]
    fn lr_words_are_written_and_read_back() {
        let off = Change::Lr {
            before: 1e-3,
            after: 1e-4,
            schedule_off_from: Some(1048),
        };
        assert_eq!(off.before_text(), "lr=1.000000e-3");
        assert_eq!(
            off.after_text(),
            "lr=1.000000e-4 (schedule off from step 1048)"
        );
        assert_eq!(
            Change::lr_from_words(&off.before_text(), &off.after_text()),
            Some(off)
        );
        let plain = Change::Lr {
            before: 0.5,
            after: 2.5e-7,
            schedule_off_from: None,
        };
        assert_eq!(plain.after_text(), "lr=2.500000e-7");
        assert_eq!(
            Change::lr_from_words(&plain.before_text(), &plain.after_text()),
            Some(plain)
        );
        for (b, a) in [
            ("lr=x", "lr=1"),
            ("lr=1", "rate 2"),
            ("lr=1", "lr=2 (schedule off from step x)"),
            ("lr=1", "lr=2 (schedule off from step 3"),
        ] {
            assert_eq!(Change::lr_from_words(b, a), None, "{b} / {a}");
        }
    }

    #[test]
    fn the_other_changes_say_what_they_said() {
        let words = |c: Change| (c.before_text(), c.after_text());
        assert_eq!(words(Change::Paused), ("running".into(), "paused".into()));
        assert_eq!(words(Change::Resumed), ("paused".into(), "running".into()));
        assert_eq!(
            words(Change::Stopping { save: true }),
            ("running".into(), "stopped (save=true)".into())
        );
        assert_eq!(
            words(Change::Checkpoint),
            (String::new(), "checkpoint".into())
        );
        let mut cos = Objectives::default();
        cos.apply(
            &ObjectiveChange::Enable {
                term: Term::Cos,
                on: true,
            },
            [10, 10, 10],
        )
        .expect("cos");
        let change = Change::Objectives {
            before: Box::new(ObjectivesInForce {
                objectives: Objectives::default(),
                spectrum_c1: None,
                rare_alpha: None,
            }),
            after: Box::new(ObjectivesInForce {
                objectives: cos.clone(),
                spectrum_c1: None,
                rare_alpha: None,
            }),
        };
        assert_eq!(words(change.clone()), ("MLE".into(), cos.label()));
        assert!(!change.changes_nothing());
        assert_eq!(
            Change::from_words(
                &Command::Objective {
                    change: ObjectiveChange::Enable {
                        term: Term::Cos,
                        on: true
                    }
                },
                "MLE",
                "CosReg γ=1",
                false
            ),
            Change::Recorded {
                before: "MLE".into(),
                after: "CosReg γ=1".into()
            }
        );
    }

    #[test]
    fn settings_changed_on_resume_say_their_words_and_read_them_back() {
        let changes = [
            ConfigChange::Steps {
                before: 100,
                after: 250,
            },
            ConfigChange::Patience {
                before: None,
                after: Some(3),
            },
            ConfigChange::Device {
                before: "cpu".into(),
                after: "cuda:1".into(),
            },
        ];
        for c in changes {
            let back = ConfigChange::from_words(c.key(), &c.before_text(), &c.after_text());
            assert_eq!(back.as_ref(), Some(&c));
        }
        assert_eq!(
            ConfigChange::Patience {
                before: Some(2),
                after: None
            }
            .after_text(),
            "off"
        );
        assert_eq!(ConfigChange::from_words("steps", "10", "many"), None);
        assert_eq!(ConfigChange::from_words("colour", "red", "blue"), None);
    }
}
