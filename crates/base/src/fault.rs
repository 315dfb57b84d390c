//! Injected I/O failures, for the tests of every write path (disk full or EIO in the middle of a
//! segment, a checkpoint, an export). Never active unless asked for.
//!
//! A plan is a comma-separated list of `POINT:N:ERRNO` — the N-th call (1-based) at POINT fails
//! with ERRNO (`ENOSPC`, `EIO`, `EACCES`, `ENOENT`, `ENOMEM`); `N+` fails that call and every
//! later one.
//! It comes from the environment variable `CONELAB_FAULT` (read once, for tests that run the
//! binary) or, in unit tests, from [`with_plan`] on the current thread.
//!
//! Points: `atomic.write` (any crash-safe file write: half the bytes are written, then the
//! error), `atomic.rename`, `segment.write`, `segment.rename`, `segment.read`,
//! `checkpoint.write`, `checkpoint.manifest` (its `checksums.json`), `checkpoint.commit`,
//! `checkpoint.committed` (the process aborts just after a
//! checkpoint is put in place, as a `kill -9` there would), `export.write`, `tfevents.write` and
//! `projector.write` (`export --format tfevents`), `projection.write`, `store.set_aside`
//! (moving an unfinished run's store aside before a restart), `log.write` (a
//! line of train.log), `manifest.write`/`manifest.rename` (a folder's `checksums.json` beside
//! `run.toml`, `vocab.tsv` or `run.json`), `run.write` (`run.toml`, `vocab.tsv`),
//! `labels.write` (`run.json` by tag, note, rename), `index.write`/`index.rename` (a run's entry
//! in the per-user run index), `segment.remove` (a compaction deleting
//! the segments it superseded); and, to kill a thread, `engine.panic` (a training step; with `ENOMEM`
//! the panic is libtorch's CUDA out-of-memory as tch raises it), `engine.nan` (a training
//! step's loss and gradients made NaN: a divergence, whatever the errno), `metrics.panic`
//! (an analysis), `metrics.second_tier` (the slower tier fails: a warning, the run goes on), `store.panic` (the recorder, at a step's rows), `spectrum.switch` (factorising
//! W fails).

use crate::error::Invalid;
use crate::error::chain;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::sync::{Mutex, OnceLock};

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    point: String,
    nth: u64,
    and_later: bool,
    errno: i32,
}

#[derive(Debug, Default)]
struct Plan {
    rules: Vec<Rule>,
    calls: HashMap<String, u64>,
}

impl Plan {
    fn parse(text: &str) -> Result<Self, Invalid> {
        let mut rules = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("CONELAB_FAULT: {part:?}: expected POINT:N:ERRNO");
            let mut it = part.split(':');
            let (Some(point), Some(n), Some(err), None) =
                (it.next(), it.next(), it.next(), it.next())
            else {
                return Err(bad().into());
            };
            let (n, and_later) = match n.strip_suffix('+') {
                Some(n) => (n, true),
                None => (n, false),
            };
            let nth: u64 = n.parse().map_err(|e| Invalid::because(bad())(e))?;
            let errno = match err {
                "ENOSPC" => libc::ENOSPC,
                "EIO" => libc::EIO,
                "EACCES" => libc::EACCES,
                "ENOENT" => libc::ENOENT,
                "ENOMEM" => libc::ENOMEM,
                _ => return Err(bad().into()),
            };
            rules.push(Rule {
                point: point.to_string(),
                nth,
                and_later,
                errno,
            });
        }
        Ok(Self {
            rules,
            calls: HashMap::new(),
        })
    }

    fn check(&mut self, point: &str) -> Option<i32> {
        if !self.rules.iter().any(|r| r.point == point) {
            return None;
        }
        let n = self.calls.entry(point.to_string()).or_insert(0);
        *n += 1;
        let n = *n;
        self.rules
            .iter()
            .find(|r| r.point == point && (r.nth == n || (r.and_later && n >= r.nth)))
            .map(|r| r.errno)
    }
}

fn global() -> &'static Mutex<Plan> {
    static PLAN: OnceLock<Mutex<Plan>> = OnceLock::new();
    PLAN.get_or_init(|| {
        let plan = std::env::var("CONELAB_FAULT")
            .ok()
            .map(|t| Plan::parse(&t))
            .transpose()
            .unwrap_or_else(|e| {
                eprintln!("conelab: warning: {}; no faults injected", chain(&e));
                None
            })
            .unwrap_or_default();
        Mutex::new(plan)
    })
}

thread_local! {
    static LOCAL: RefCell<Option<Plan>> = const { RefCell::new(None) };
}

/// The injected error for this call at `point`, if the plan says so.
pub fn check(point: &str) -> io::Result<()> {
    let local = LOCAL.with(|l| l.borrow_mut().as_mut().map(|p| p.check(point)));
    let errno = match local {
        Some(e) => e,
        None => global()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .check(point),
    };
    match errno {
        Some(e) => Err(io::Error::from_raw_os_error(e)),
        None => Ok(()),
    }
}

/// Runs `f` with a fault plan on this thread (unit tests).
pub fn with_plan<T>(plan: &str, f: impl FnOnce() -> T) -> T {
    let parsed = Plan::parse(plan).unwrap_or_else(|e| panic!("{e}"));
    LOCAL.with(|l| *l.borrow_mut() = Some(parsed));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            LOCAL.with(|l| *l.borrow_mut() = None);
        }
    }
    let _reset = Reset;
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_call_fails_and_others_pass() {
        with_plan("x.write:2:ENOSPC,y:1+:EIO", || {
            assert!(check("x.write").is_ok());
            let e = check("x.write").expect_err("second call");
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
            assert!(check("x.write").is_ok());
            assert!(check("other").is_ok());
            for _ in 0..3 {
                assert_eq!(check("y").expect_err("y").raw_os_error(), Some(libc::EIO));
            }
        });
        assert!(check("x.write").is_ok(), "the plan ends with the closure");
    }

    #[test]
    fn a_bad_plan_is_refused() {
        assert!(Plan::parse("x:1").is_err());
        assert!(Plan::parse("x:one:EIO").is_err());
        assert!(Plan::parse("x:1:EWHAT").is_err());
    }
}
