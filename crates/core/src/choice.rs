//! Settings that take one of a few names (`--model tiny`, `schedule = "cosine"`): each value's
//! name and its line of help, said once here for the command line, config files and sweeps
//! alike (the command line's parser is the run crate's: core knows nothing of clap).

/// A setting with a fixed set of named values.
pub trait Choice: Copy + Send + Sync + 'static {
    /// Every value, in the order help lists them.
    const ALL: &'static [Self];
    /// The value's name on the command line and in files.
    fn name(self) -> &'static str;
    /// One line on what the value does, for `--help`.
    fn help(self) -> &'static str;
    /// The value named `name`, ignoring ASCII case (a config file's `preset = "Tiny"`).
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.name().eq_ignore_ascii_case(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Preset;
    use crate::train_config::{OptimizerKind, Precision, Schedule};

    /// Every value's name reads back as that value, in any case, and the names are the files'
    /// (serde's) names.
    fn names_round_trip<T: Choice + PartialEq + std::fmt::Debug + serde::Serialize>() {
        for &v in T::ALL {
            assert_eq!(T::from_name(v.name()), Some(v));
            assert_eq!(T::from_name(&v.name().to_ascii_uppercase()), Some(v));
            assert_eq!(
                serde_json::to_value(v).expect("serialises"),
                serde_json::Value::String(v.name().into())
            );
            assert!(!v.help().is_empty() && !v.help().ends_with('.'));
        }
        assert_eq!(T::from_name("no-such-value"), None);
    }

    #[test]
    fn every_choice_reads_its_own_names() {
        names_round_trip::<Preset>();
        names_round_trip::<OptimizerKind>();
        names_round_trip::<Schedule>();
        names_round_trip::<Precision>();
    }
}
