//! The command line's parser for core's [`Choice`] settings (`--model`, `--optimizer`,
//! `--schedule`, `--precision`): clap's enum parser, fed from the one list of names and help
//! lines core keeps, so `--help` and the error for an unknown name read as clap writes them.

use std::ffi::OsStr;
use std::marker::PhantomData;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::error::Error;

use conelab_core::choice::Choice;

/// A value parser for `T`: `#[arg(long, value_parser = choice::<Preset>())]`.
pub fn choice<T: Choice>() -> ChoiceParser<T> {
    ChoiceParser(PhantomData)
}

/// The parser [`choice`] makes.
#[derive(Debug, Clone, Copy)]
pub struct ChoiceParser<T>(PhantomData<T>);

impl<T: Choice> ChoiceParser<T> {
    fn values() -> impl Iterator<Item = PossibleValue> {
        T::ALL
            .iter()
            .map(|v| PossibleValue::new(v.name()).help(v.help()))
    }
}

impl<T: Choice> TypedValueParser for ChoiceParser<T> {
    type Value = T;

    /// clap's own parser of possible values decides (exact names, or any case where the argument
    /// ignores case) and writes the error for a stranger — the possible values and its
    /// suggestion, as for a derived enum.
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, Error> {
        let name = PossibleValuesParser::new(Self::values()).parse_ref(cmd, arg, value)?;
        let ignore_case = arg.is_some_and(clap::Arg::is_ignore_case_set);
        T::ALL
            .iter()
            .copied()
            .find(|v| PossibleValue::new(v.name()).matches(&name, ignore_case))
            .ok_or_else(|| Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Self::values()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use conelab_core::model::Preset;

    #[derive(Debug, Parser)]
    struct Cli {
        #[arg(long, value_parser = choice::<Preset>(), default_value = "tiny")]
        model: Preset,
    }

    #[test]
    fn names_parse_and_a_stranger_is_clap_s_error_with_the_possible_values() {
        let cli = Cli::try_parse_from(["x", "--model", "gpt2-small"]).expect("parses");
        assert_eq!(cli.model, Preset::Gpt2Small);
        assert_eq!(
            Cli::try_parse_from(["x"]).expect("default").model,
            Preset::Tiny
        );
        let e = Cli::try_parse_from(["x", "--model", "tinyy"])
            .expect_err("unknown")
            .to_string();
        assert!(
            e.contains("invalid value 'tinyy' for '--model <MODEL>'")
                && e.contains("[possible values: tiny, small, lstm, awd, gpt2-small]"),
            "{e}"
        );
        // Exact names on the command line, as clap's derive had it.
        assert!(Cli::try_parse_from(["x", "--model", "Tiny"]).is_err());
    }
}
