//! `--format`: the one output-format flag of every command that prints a report (`export` has
//! its own, with the file formats). The switches it replaced, `--json` and `--markdown`, stay as
//! hidden spellings of `--format json` and `--format md`: scripts written before keep working.

use anyhow::{Result, bail};
use clap::Args;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// For a person at a terminal.
    Table,
    /// For a program (stable keys).
    Json,
    #[value(alias = "markdown")]
    Md,
    #[value(alias = "tex")]
    Latex,
    Csv,
    Parquet,
}

#[derive(Debug, Clone, Default, Args)]
pub struct OutputArgs {
    /// Output format [default: table]; each command says which it writes.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,
    /// `--format json`.
    #[arg(long, hide = true)]
    pub json: bool,
    /// `--format md`.
    #[arg(long, hide = true)]
    pub markdown: bool,
}

impl OutputArgs {
    /// The format asked for, if the command writes it (`allowed`, the first being the default).
    pub fn choose(&self, command: &str, allowed: &[OutputFormat]) -> Result<OutputFormat> {
        let switch = match (self.json, self.markdown) {
            (true, true) => bail!("--json and --markdown ask for two formats: give one --format"),
            (true, false) => Some(OutputFormat::Json),
            (false, true) => Some(OutputFormat::Md),
            (false, false) => None,
        };
        let chosen = match (self.format, switch) {
            (Some(f), Some(s)) if f != s => bail!(
                "--format {} and --{} disagree: give one",
                name(f),
                if s == OutputFormat::Json {
                    "json"
                } else {
                    "markdown"
                }
            ),
            (Some(f), _) | (None, Some(f)) => f,
            (None, None) => return Ok(allowed.first().copied().unwrap_or(OutputFormat::Table)),
        };
        if !allowed.contains(&chosen) {
            let names: Vec<&str> = allowed.iter().map(|f| name(*f)).collect();
            bail!(
                "{command} writes --format {}, not {}",
                names.join(", "),
                name(chosen)
            );
        }
        Ok(chosen)
    }

    /// [`Self::choose`] for a command that writes a table or JSON: whether JSON was asked for.
    pub fn json(&self, command: &str) -> Result<bool> {
        Ok(self.choose(command, &[OutputFormat::Table, OutputFormat::Json])? == OutputFormat::Json)
    }

    /// Whether anything but the default was asked for (without checking it).
    pub fn given(&self) -> bool {
        self.format.is_some() || self.json || self.markdown
    }
}

fn name(f: OutputFormat) -> &'static str {
    match f {
        OutputFormat::Table => "table",
        OutputFormat::Json => "json",
        OutputFormat::Md => "md",
        OutputFormat::Latex => "latex",
        OutputFormat::Csv => "csv",
        OutputFormat::Parquet => "parquet",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutputFormat::*;

    fn args(format: Option<OutputFormat>, json: bool, markdown: bool) -> OutputArgs {
        OutputArgs {
            format,
            json,
            markdown,
        }
    }

    #[test]
    fn the_old_switches_are_spellings_of_the_format() {
        let allowed = [Table, Json, Md];
        let pick = |a: OutputArgs| a.choose("eval", &allowed).map_err(|e| e.to_string());
        assert_eq!(pick(args(None, false, false)), Ok(Table));
        assert_eq!(pick(args(None, true, false)), Ok(Json));
        assert_eq!(pick(args(None, false, true)), Ok(Md));
        assert_eq!(pick(args(Some(Json), true, false)), Ok(Json));
        assert!(pick(args(Some(Md), true, false)).is_err_and(|e| e.contains("disagree")));
        assert!(pick(args(None, true, true)).is_err_and(|e| e.contains("two formats")));
        assert_eq!(
            pick(args(Some(Csv), false, false)),
            Err("eval writes --format table, json, md, not csv".into())
        );
    }
}
