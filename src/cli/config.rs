//! `conelab config show`: the settings in force and where each came from.

use anyhow::Result;
use clap::Subcommand;
use conelab_base::settings::{self, ColorChoice, Setting, Settings, ThemeChoice};

use super::print_stdout;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the resolved settings — data roots, run roots, the run index, theme, colour, default device — each
    /// with where it came from (the environment, a line of the config file, the default).
    Show {
        #[command(flatten)]
        output: super::output::OutputArgs,
    },
}

pub fn exec(command: ConfigCommand) -> Result<()> {
    // A malformed file stopped the command before this (main checks it first).
    let ConfigCommand::Show { output } = command;
    let json = output.json("config show")?;
    let c = settings::current();
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&to_json(c))?));
    }
    print_stdout(&render(c))
}

fn theme(t: ThemeChoice) -> &'static str {
    match t {
        ThemeChoice::Dark => "dark",
        ThemeChoice::Light => "light",
    }
}

fn color(c: ColorChoice) -> &'static str {
    match c {
        ColorChoice::Auto => "auto",
        ColorChoice::Never => "never",
    }
}

fn render(c: &Settings) -> String {
    let mut out = format!(
        "config file  {}{}\n",
        c.file.display(),
        if c.file_exists { "" } else { " (none)" }
    );
    let mut list = |title: &str, items: &[Setting<std::path::PathBuf>]| {
        if items.is_empty() {
            out.push_str(&format!("{title:<12} –\n"));
        }
        for (i, s) in items.iter().enumerate() {
            // A root that is there but is a file is not "missing" (issue #58).
            let missing = if s.value.is_dir() {
                ""
            } else if s.value.exists() {
                " (not a folder)"
            } else {
                " (missing)"
            };
            out.push_str(&format!(
                "{:<12} {}{missing}  [{}]\n",
                if i == 0 { title } else { "" },
                s.value.display(),
                s.from
            ));
        }
    };
    list("data roots", &c.data_roots);
    list("run roots", &c.run_roots);
    out.push_str(&format!(
        "{:<12} {}  [{}]\n",
        "run index",
        c.index_dir.value.display(),
        c.index_dir.from
    ));
    out.push_str(&format!(
        "{:<12} {}  [{}]\n",
        "cache",
        c.cache_dir.value.display(),
        c.cache_dir.from
    ));
    out.push_str(&format!(
        "{:<12} {}  [{}]\n",
        "theme",
        theme(c.theme.value),
        c.theme.from
    ));
    out.push_str(&format!(
        "{:<12} {}  [{}]\n",
        "color",
        color(c.color.value),
        c.color.from
    ));
    out.push_str(&format!(
        "{:<12} {}  [{}]\n",
        "device",
        c.device.value.as_deref().unwrap_or("cpu"),
        c.device.from
    ));
    out
}

fn to_json(c: &Settings) -> serde_json::Value {
    let paths = |items: &[Setting<std::path::PathBuf>]| {
        items
            .iter()
            .map(|s| serde_json::json!({"path": s.value.to_string_lossy(), "from": s.from.to_string()}))
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "file": c.file.to_string_lossy(),
        "file_exists": c.file_exists,
        "data_roots": paths(&c.data_roots),
        "run_roots": paths(&c.run_roots),
        "run_index": {"path": c.index_dir.value.to_string_lossy(), "from": c.index_dir.from.to_string()},
        "cache": {"path": c.cache_dir.value.to_string_lossy(), "from": c.cache_dir.from.to_string()},
        "theme": {"value": theme(c.theme.value), "from": c.theme.from.to_string()},
        "color": {"value": color(c.color.value), "from": c.color.from.to_string()},
        "device": {"value": c.device.value.as_deref().unwrap_or("cpu"), "from": c.device.from.to_string()},
    })
}
