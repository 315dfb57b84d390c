//! `conelab completions SHELL`: a shell completion script.

use anyhow::Result;

use super::print_stdout;

pub fn exec(shell: clap_complete::Shell) -> Result<()> {
    let mut command = <super::Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "conelab", &mut script);
    print_stdout(&String::from_utf8_lossy(&script))
}
