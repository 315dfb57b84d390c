//! The `conelab` binary: parse the command line, run, and turn every failure into one line on
//! stderr with exit status 2 (bad input), 4 (the OS refused something a run needs) or 5
//! (damaged data). A run's own
//! exit status (`conelab train --help`) comes back from `cli::run`.

mod cli;
mod exit_status;

// Counting is off except inside `conelab bench` (see alloc_count).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: conelab_base::alloc_count::CountingAllocator<mimalloc::MiMalloc> =
    conelab_base::alloc_count::CountingAllocator(mimalloc::MiMalloc);

#[cfg(not(feature = "mimalloc"))]
#[global_allocator]
static ALLOCATOR: conelab_base::alloc_count::CountingAllocator<std::alloc::System> =
    conelab_base::alloc_count::CountingAllocator(std::alloc::System);

use std::process::ExitCode;

use conelab_base::exit::ExitStatus;

use clap::Parser;
use clap::error::ErrorKind;
use conelab_base::stderr::say;

fn main() -> ExitCode {
    conelab_base::revision::set(option_env!("CONELAB_GIT_REVISION"));
    // `CONELAB_COMPLETE=bash conelab …`: the shell asks for completions (run names included);
    // answered and exited here. Not clap's default `COMPLETE`: too common a name to claim.
    clap_complete::CompleteEnv::with_factory(<cli::Cli as clap::CommandFactory>::command)
        .var("CONELAB_COMPLETE")
        .complete();
    conelab::allocator::keep_freed_memory();
    // Defence in depth: a bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        // A decoder's panic on a damaged file is caught and reported as that file's damage.
        if conelab_base::integrity::catching_panic() {
            return;
        }
        // A panic of a run's worker threads is caught there and reported as the run's failure.
        let thread = std::thread::current();
        if matches!(
            thread.name(),
            Some("conelab-engine" | "conelab-metrics" | "conelab-store")
        ) {
            return;
        }
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        say(&format!(
            "conelab: internal error: {msg}{at} (please report this)"
        ));
    }));

    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // A malformed config file stops every command, with its line (before anything is done
    // with settings it might have meant to change).
    match conelab_base::settings::check() {
        Ok(config) => {
            for w in &config.warnings {
                say(&format!("conelab: warning: {w}"));
            }
        }
        Err(e) => {
            say(&format!("conelab: error: {e}"));
            return ExitStatus::BadInput.into();
        }
    }
    match cli::run(cli) {
        Ok(status) => status.into(),
        Err(e) => {
            let status = exit_status::of(&e);
            // Each cause once: an error whose message already ends with its source's text
            // (thiserror's `{0}` beside `#[source]`) would otherwise print that text twice.
            let error: &(dyn std::error::Error + 'static) = e.as_ref();
            say(&format!(
                "conelab: error: {}",
                conelab_base::error::chain(error)
            ));
            status.into()
        }
    }
}

/// Help and version go out as clap renders them; a usage error becomes one line with all that
/// clap said: the error, its tips ("a similar argument exists: '--json'") and the usage.
fn usage_error(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            use std::io::{IsTerminal, Write};
            // On a terminal clap prints (and colours); elsewhere the text is written here, so
            // that a write that fails (`--help > /dev/full`) is an error, not a silent exit 0.
            if e.use_stderr() || std::io::stdout().is_terminal() {
                let _ = e.print();
                return ExitCode::from(e.exit_code() as u8);
            }
            let text = e.render().to_string();
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Err(w) if w.kind() != std::io::ErrorKind::BrokenPipe => {
                    say(&format!("conelab: error: writing to stdout: {w}"));
                    ExitStatus::Failed.into()
                }
                _ => ExitCode::from(e.exit_code() as u8),
            }
        }
        _ => {
            say(&format!(
                "conelab: error: {}",
                one_line(&e.render().to_string())
            ));
            ExitStatus::BadInput.into()
        }
    }
}

/// clap's rendering of a usage error (error, blank line, `  tip: …` lines, `Usage: …`, "For more
/// information, try '--help'.") as one line: `ERROR; tip: …; usage: …`.
fn one_line(rendered: &str) -> String {
    let mut error = None;
    let mut parts = Vec::new();
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(tip) = line.strip_prefix("tip: ") {
            parts.push(format!("tip: {tip}"));
        } else if let Some(usage) = line.strip_prefix("Usage: ") {
            parts.push(format!("usage: {usage}"));
        } else if line.starts_with("For more information") {
            continue;
        } else if error.is_none() {
            error = Some(line.strip_prefix("error: ").unwrap_or(line).to_string());
        } else {
            // A continuation of the error (a list of possible values, …).
            parts.push(line.to_string());
        }
    }
    let mut out = error.unwrap_or_else(|| "invalid command line".into());
    for p in parts {
        // A line ending in `:` introduces the next ("…were not provided:" then the argument).
        out.push_str(if out.ends_with(':') { " " } else { "; " });
        out.push_str(&p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_usage_error_keeps_its_tip_and_usage_on_one_line() {
        let rendered = "error: unexpected argument '--jsn' found\n\n  tip: a similar argument exists: '--json'\n\nUsage: conelab runs --json [DIR]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "unexpected argument '--jsn' found; tip: a similar argument exists: '--json'; usage: conelab runs --json [DIR]"
        );
        assert_eq!(one_line(""), "invalid command line");
        let missing = "error: the following required arguments were not provided:\n  <RUNS>...\n\nUsage: conelab export <RUNS>...\n";
        assert_eq!(
            one_line(missing),
            "the following required arguments were not provided: <RUNS>...; usage: conelab export <RUNS>..."
        );
    }
}
