//! What a viewer gets from following runs from their folders (the compare view): the rows of the
//! series it asked for, each run's label and state, what could not be read. The thread that
//! reads the stores is the catalog's (`conelab_catalog::follow`): the view never touches a disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};

use conelab_core::series::SeriesName;

/// One metrics row of a followed run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// The series (`conelab_core::series::series_key` of split, group, metric).
    pub key: i64,
    pub step: u64,
    /// Seconds since the Unix epoch.
    pub wall: f64,
    pub value: f64,
}

/// What the follower learnt about run number `run` (its index in the list it was given).
#[derive(Debug, Clone, PartialEq)]
pub enum FollowUpdate {
    /// New rows of the wanted series; `reset`: they replace everything sent before.
    Rows {
        run: usize,
        reset: bool,
        rows: Vec<Row>,
    },
    /// Its label (name and tags) and status (live, completed, stopped, …), when they change.
    State {
        run: usize,
        label: String,
        status: String,
    },
    /// A segment skipped as corrupt (said once).
    Warning { run: usize, message: String },
    /// Its store cannot be read right now (`Some`, said once per new reason), or can again
    /// (`None`).
    Error { run: usize, message: Option<String> },
    /// Series met for the first time (in any run), that a view may ask for: every series but
    /// the spectrum's singular values, the run's facts and histogram bins.
    Series { names: Vec<SeriesName> },
    /// The follower itself stopped (a bug): nothing more will come.
    Stopped { message: String },
}

/// A running follower: its updates, and what stops its thread when dropped (the two can be
/// held apart: the updates handed on to a viewer's loop, the stop kept by the view).
pub struct Follower {
    pub updates: Receiver<FollowUpdate>,
    pub stop: StopFollowing,
    /// Series keys to send from now on as well (their whole history first: the stores are read
    /// again from the start, as a reset).
    pub want: Sender<i64>,
}

/// Stops the follower's thread when dropped.
pub struct StopFollowing(Arc<AtomicBool>);

impl StopFollowing {
    /// Sets `flag` when dropped (the follower's thread checks it).
    pub fn new(flag: Arc<AtomicBool>) -> Self {
        Self(flag)
    }
}

impl Drop for StopFollowing {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
