//! What `conelab runs` shows of a run's store, read in one pass: its record, the newest training
//! step, the best validation PPL, the newest I1 and mean cosine, the objectives in force, and
//! what the read skipped.

use std::path::Path;

use conelab_core::series::{series_key, split};

use crate::{RunRecord, StoreError, col};

/// A run's store in the numbers a list of runs shows.
#[derive(Debug, Clone)]
pub struct StoreSummary {
    pub record: RunRecord,
    /// One line per unreadable segment that was skipped, or a lost `run.json`.
    pub warnings: Vec<String>,
    /// The newest training step recorded.
    pub newest_step: Option<u64>,
    /// The lowest total validation PPL.
    pub best_valid_ppl: Option<f64>,
    /// The newest analysed snapshot's I1 and mean cosine.
    pub i1: Option<f64>,
    pub mean_cos: Option<f64>,
    /// The objectives in force: the newest start or change of objectives, as its label.
    pub objective: Option<String>,
    /// The newest row's wall time (Unix seconds): where a run that crashed stopped, so its wall
    /// time is not reckoned to now.
    pub newest_wall: Option<f64>,
    /// The step of the newest finding that the model did worse than a uniform guess.
    pub worse_than_uniform: Option<u64>,
}

/// The summary of the store of the run in `run_dir`. A store whose numbers cannot be read (a
/// table without its columns) still gives its record and warnings, with no numbers.
pub fn read(run_dir: &Path) -> Result<StoreSummary, StoreError> {
    let st = crate::load(run_dir)?;
    let mut summary = StoreSummary {
        record: st.run().clone(),
        warnings: st.warnings().to_vec(),
        newest_step: None,
        best_valid_ppl: None,
        i1: None,
        mean_cos: None,
        objective: None,
        newest_wall: None,
        worse_than_uniform: None,
    };
    let _ = numbers(&st, &mut summary);
    Ok(summary)
}

fn numbers(st: &crate::LoadedStore, n: &mut StoreSummary) -> Result<(), StoreError> {
    let df = st.metrics();
    let keys = df.column(col::KEY)?.i64()?;
    let steps = df.column(col::STEP)?.u64()?;
    let values = df.column(col::VALUE)?.f64()?;
    n.newest_wall = df
        .column(col::WALL_TIME)?
        .f64()?
        .iter()
        .flatten()
        .filter(|w| w.is_finite())
        .reduce(f64::max);
    let (loss, ppl, i1, cos) = (
        series_key(split::TRAIN, "total", "loss"),
        series_key(split::VALID, "total", "ppl"),
        series_key(split::EMBEDDING, "total", "i1"),
        series_key(split::EMBEDDING, "total", "mean_cos"),
    );
    let mut newest_i1 = 0;
    let mut newest_cos = 0;
    for ((k, s), v) in keys.iter().zip(steps.iter()).zip(values.iter()) {
        let (Some(k), Some(s), Some(v)) = (k, s, v) else {
            continue;
        };
        if k == loss {
            n.newest_step = Some(n.newest_step.map_or(s, |x| x.max(s)));
        } else if k == ppl && v.is_finite() {
            n.best_valid_ppl = Some(n.best_valid_ppl.map_or(v, |b| b.min(v)));
        } else if k == i1 && s >= newest_i1 {
            newest_i1 = s;
            n.i1 = Some(v);
        } else if k == cos && s >= newest_cos {
            newest_cos = s;
            n.mean_cos = Some(v);
        }
    }
    n.objective = crate::query::objective_at(st.events(), None)?;
    let events = st.events();
    let kinds = events.column(col::KIND)?.str()?;
    let event_steps = events.column(col::STEP)?.u64()?;
    n.worse_than_uniform = kinds
        .iter()
        .zip(event_steps.iter())
        .filter(|(k, _)| *k == Some(crate::writer::WORSE_THAN_UNIFORM))
        .filter_map(|(_, s)| s)
        .max();
    Ok(())
}
