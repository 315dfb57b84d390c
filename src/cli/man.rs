//! `conelab man`: the manual pages, from the same clap definitions.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::print_stdout;

pub fn exec(dir: Option<PathBuf>) -> Result<()> {
    let command = <super::Cli as clap::CommandFactory>::command();
    match dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command).render(&mut page)?;
            print_stdout(&String::from_utf8_lossy(&page))
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let pages = man_pages(command)?;
            for (name, page) in &pages {
                let path = dir.join(format!("{name}.1"));
                conelab_base::atomic::write_file_as("manual page", &path, page)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            print_stdout(&format!(
                "{} manual pages in {}\n",
                pages.len(),
                dir.display()
            ))
        }
    }
}

/// The page of `command` and of every subcommand below it, named `conelab`, `conelab-train`,
/// `conelab-bench-train`, … (the names `man` finds them by).
fn man_pages(command: clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    type Pages = Vec<(String, Vec<u8>)>;
    fn walk(command: clap::Command, name: String, out: &mut Pages) -> std::io::Result<()> {
        let command = command.name(name.clone());
        let mut page = Vec::new();
        clap_mangen::Man::new(command.clone()).render(&mut page)?;
        out.push((name.clone(), page));
        for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    let mut command = command;
    command.build();
    walk(command, "conelab".into(), &mut out)?;
    Ok(out)
}
