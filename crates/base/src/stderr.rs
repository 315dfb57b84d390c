//! Lines for the user on stderr that never take a thread down with them.

/// Says a line on stderr (the terminal, or a background run's output.log) and drops it when
/// stderr has gone (the starter of a detached run exited as the run announced itself, a
/// `2>&1 | tee` died): `eprintln!` panics on a failed write, and a run must never lose the
/// thread that serves a viewer or hears a signal, nor abort at its end, over a line nobody
/// can read.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
