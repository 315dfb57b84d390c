//! Buffers rows and writes them as Parquet segments; maps engine events to rows.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::buffer::{EventBuffer, MetricBuffer};
use super::segment::{self, Compaction, Keep, Kind};
use super::{RUN_RECORD, RunRecord, STORE_DIR, StoreError, io_error};
use conelab_base::clock::unix_now;
use conelab_base::error::Invalid;
use conelab_base::lockfile::{LockError, LockFile};
use conelab_core::events::{Command, EmbeddingStats, EvalStats, Event, StepStats, SystemStats};
use conelab_core::objective::ObjectiveChange;
use conelab_core::series::{GROUPS, spectrum_metric, split};
use conelab_metrics::embedding::SetStats;

/// When the buffer goes to disk: whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlushPolicy {
    pub rows: usize,
    pub interval: Duration,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        Self {
            rows: 100_000,
            interval: Duration::from_secs(5),
        }
    }
}

/// The store's writer lock: an OS lock held by the one process that writes the store (see
/// `conelab_base::lockfile`), released by the kernel however that process ends.
pub const WRITER_LOCK: &str = "writer.lock";

/// Who holds the store's writer lock (`pid N on HOST`), if anyone.
pub fn live_writer(store_dir: &Path) -> Result<Option<String>, StoreError> {
    let path = store_dir.join(WRITER_LOCK);
    LockFile::holder(&path).map_err(|e| lock_error(&path, e))
}

fn lock_error(path: &Path, e: LockError) -> StoreError {
    match e {
        LockError::Io { path, source } => StoreError::Io { path, source },
        LockError::Held { holder } => StoreError::Invalid(
            format!(
                "{}: another conelab process ({holder}) is writing this store",
                path.parent()
                    .and_then(Path::parent)
                    .unwrap_or(path)
                    .display()
            )
            .into(),
        ),
    }
}

/// Takes the store's writer lock (for a writer, or a compaction by hand).
pub fn lock_store(store_dir: &Path) -> Result<LockFile, StoreError> {
    std::fs::create_dir_all(store_dir).map_err(io_error(store_dir))?;
    // The readers' lock is there from the start, so a reader without write access to the
    // folder can still take it (read-only).
    segment::open_readers_lock(store_dir)
        .map_err(io_error(&store_dir.join(segment::READERS_LOCK)))?;
    let path = store_dir.join(WRITER_LOCK);
    LockFile::acquire(
        &path,
        &conelab_base::lockfile::holder_text(),
        Duration::from_millis(500),
    )
    .map_err(|e| lock_error(&path, e))
}

/// Segment files at which [`StoreWriter::roll`] merges them into one base per table.
pub const ROLL_AT: usize = 200;

/// The events table's kind of an [`Event::WeightsBroken`] (its reason in `detail`).
pub const WEIGHTS_BROKEN: &str = "weights broken";
/// The events table's kind of an [`Event::WorseThanUniform`].
pub const WORSE_THAN_UNIFORM: &str = "worse than uniform";

/// Appends to one run's store.
pub struct StoreWriter {
    dir: PathBuf,
    metrics: MetricBuffer,
    events: EventBuffer,
    next_seq: u64,
    policy: FlushPolicy,
    last_flush: Instant,
    /// The newest training epoch seen, stamped on evaluation and embedding rows.
    epoch: f64,
    _lock: LockFile,
}

/// Deletes what killed writers left: temporary files (`.NAME.tmp-PID-N`, `atomic::temp_name`)
/// of segments, projections and the run record that never became the file they were for. Only
/// with the writer lock held: no other process writes here then, so none of them is in use. A
/// file that cannot be removed stays (it is ignored by every reader anyway).
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp-") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl StoreWriter {
    /// Opens the store of `run_dir`, creating it with `record` if it has none (an existing
    /// store keeps its record: a resumed run continues it). Holds the store's writer lock until
    /// dropped.
    pub fn open(run_dir: &Path, record: &RunRecord) -> Result<Self, StoreError> {
        let dir = run_dir.join(STORE_DIR);
        let lock = lock_store(&dir)?;
        let record_path = dir.join(RUN_RECORD);
        let run_id = if record_path.exists() {
            super::read_run_record(&dir)?.run_id
        } else {
            let json = serde_json::to_string_pretty(record).map_err(|e| {
                StoreError::Invalid(Invalid::because(format!("encoding {RUN_RECORD}"))(e))
            })?;
            conelab_base::integrity::write_recorded("atomic", &dir, RUN_RECORD, json.as_bytes())?;
            record.run_id.clone()
        };
        remove_stale_temps(&dir);
        // Segments a reader kept from an earlier compaction's deletion.
        segment::remove_dead(&dir)?;
        let next_seq = segment::next_seq(&dir)?;
        segment::record_checksummed_from(&dir, next_seq)?;
        Ok(Self {
            dir,
            metrics: MetricBuffer::new(&run_id),
            events: EventBuffer::new(&run_id),
            next_seq,
            policy: FlushPolicy::default(),
            last_flush: Instant::now(),
            epoch: 0.0,
            _lock: lock,
        })
    }

    pub fn with_policy(mut self, policy: FlushPolicy) -> Self {
        self.policy = policy;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn buffered_rows(&self) -> usize {
        self.metrics.len() + self.events.len()
    }

    /// Buffers one metric row.
    pub fn push_metric(&mut self, step: u64, split: &str, group: &str, metric: &str, value: f64) {
        self.metrics
            .push(step, self.epoch, unix_now(), split, group, metric, value);
    }

    /// Buffers one metric row with an explicit epoch and wall time (imports, benchmarks).
    #[allow(clippy::too_many_arguments)]
    pub fn push_metric_at(
        &mut self,
        step: u64,
        epoch: f64,
        wall_time: f64,
        split: &str,
        group: &str,
        metric: &str,
        value: f64,
    ) {
        self.metrics
            .push(step, epoch, wall_time, split, group, metric, value);
    }

    /// Buffers one event row.
    pub fn push_event(&mut self, step: u64, kind: &str, detail: &str, before: &str, after: &str) {
        self.push_event_at(step, unix_now(), kind, detail, before, after);
    }

    /// Buffers one event row with an explicit wall time.
    pub fn push_event_at(
        &mut self,
        step: u64,
        wall_time: f64,
        kind: &str,
        detail: &str,
        before: &str,
        after: &str,
    ) {
        self.events
            .push(step, wall_time, kind, detail, before, after);
    }

    /// Whether the policy says the buffer should go to disk now.
    pub fn flush_due(&self) -> bool {
        let rows = self.buffered_rows();
        rows >= self.policy.rows || (rows > 0 && self.last_flush.elapsed() >= self.policy.interval)
    }

    /// Writes the buffer if the policy says so.
    pub fn maybe_flush(&mut self) -> Result<(), StoreError> {
        if self.flush_due() {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered rows as new segments (nothing when empty), all or nothing: both
    /// segments of a sequence number are written and fsynced as temporary files first, then put
    /// in place without ever replacing a file; if the second cannot be placed the first is taken
    /// back. The buffers are cleared only once both are durable; on error every row stays
    /// buffered for the next attempt.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.last_flush = Instant::now();
        if self.metrics.is_empty() && self.events.is_empty() {
            return Ok(());
        }
        let seq = self.next_seq;
        let mut frames = Vec::new();
        if !self.metrics.is_empty() {
            frames.push((Kind::Metrics, self.metrics.to_frame()?));
        }
        if !self.events.is_empty() {
            frames.push((Kind::Events, self.events.to_frame()?));
        }
        let mut temps: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (kind, mut df) in frames {
            let written = segment::encode(&mut df).and_then(|bytes| {
                // Named with its checksum (`segment::path_of`), verified by every reader.
                let path = segment::path_of(&self.dir, kind, seq, false, &bytes);
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                segment::write_temp(&self.dir, &name.unwrap_or_default(), &bytes)
                    .map(|tmp| (tmp, path))
            });
            match written {
                Ok(written) => temps.push(written),
                Err(e) => {
                    for (tmp, _) in &temps {
                        let _ = std::fs::remove_file(tmp);
                    }
                    return Err(e);
                }
            }
        }
        let mut placed: Vec<PathBuf> = Vec::new();
        let mut pending = temps.into_iter();
        while let Some((tmp, path)) = pending.next() {
            if let Err(e) = segment::place(&tmp, &path) {
                for (tmp, _) in pending {
                    let _ = std::fs::remove_file(tmp);
                }
                let mut taken_back = true;
                for p in &placed {
                    taken_back &= std::fs::remove_file(p).is_ok();
                }
                let _ = conelab_base::atomic::sync_dir(&self.dir);
                if !taken_back || is_already_exists(&e) {
                    // A file of this number stays on disk: never use the number again. (A
                    // metrics segment left behind only repeats rows the next flush writes again;
                    // the loader keeps one of each.)
                    self.next_seq = segment::next_seq(&self.dir).unwrap_or(seq + 1).max(seq + 1);
                }
                return Err(e);
            }
            placed.push(path);
        }
        self.metrics.clear();
        self.events.clear();
        self.next_seq = seq + 1;
        Ok(())
    }

    /// Rolls the store's segments into one base per table once there are [`ROLL_AT`] segment
    /// files or more (a flush every 5 s makes ~720 an hour): however long the run, its store keeps
    /// fewer than `ROLL_AT` + 2 of them, instead of one pair a flush until the end. The
    /// buffered rows are not touched; readers of the store see the new base supersede the old
    /// segments the moment it is in place (as at the end of a run). `None` when not due.
    pub fn roll(&mut self) -> Result<Option<Compaction>, StoreError> {
        let files = segment::list(&self.dir)?.len();
        if files < ROLL_AT {
            return Ok(None);
        }
        // Segments a reader kept from the last roll's deletion go first (they are dead).
        if segment::remove_dead(&self.dir)? > 0 && segment::list(&self.dir)?.len() < ROLL_AT {
            return Ok(None);
        }
        let done = self.compact_now(Keep::All)?;
        Ok(Some(done))
    }

    /// Flushes, then rewrites the store as one segment per table.
    pub fn compact(&mut self) -> Result<Compaction, StoreError> {
        self.flush()?;
        self.compact_now(Keep::All)
    }

    /// A run (re)starting at `step`: rows recorded after it belong to a timeline that no longer
    /// exists and are dropped (the run records them anew); at step 0 nothing of an earlier
    /// attempt is kept.
    pub fn start_at(&mut self, step: u64) -> Result<Compaction, StoreError> {
        self.flush()?;
        if segment::list(&self.dir)?.is_empty() {
            return Ok(Compaction::default());
        }
        let keep = if step == 0 {
            Keep::Nothing
        } else {
            Keep::UpTo(step)
        };
        self.compact_now(keep)
    }

    /// Compacts, then numbers the next flush after whatever the compaction placed — also when
    /// it failed after placing its base (deleting what it superseded): a segment numbered
    /// below that base would read as superseded and be lost.
    fn compact_now(&mut self, keep: Keep) -> Result<Compaction, StoreError> {
        let done = segment::compact(&self.dir, keep);
        let next = segment::next_seq(&self.dir);
        if let Ok(next) = &next {
            self.next_seq = self.next_seq.max(*next);
        }
        let done = done?;
        next?;
        Ok(done)
    }

    /// Keeps the 2-D projections of an analysed snapshot (the time scrub), atomically.
    pub fn write_projection(
        &self,
        frame: &conelab_core::events::ProjectionFrame,
    ) -> Result<(), StoreError> {
        super::projection::write(&self.dir, frame)
    }

    /// Turns an engine event into rows. Returns true for the run's final event.
    pub fn record(&mut self, event: &Event) -> Result<bool, StoreError> {
        if let Event::Step(s) = event
            && conelab_base::fault::check("store.panic").is_err()
        {
            panic!("injected recorder panic at step {}", s.step);
        }
        match event {
            Event::Started(s) => {
                self.push_event(s.step, "start", &s.objective, "", &s.device);
                for (metric, value) in [
                    ("total_steps", s.total_steps as f64),
                    ("windows_per_epoch", s.windows_per_epoch as f64),
                    ("parameters", s.parameters as f64),
                ] {
                    self.push_metric(s.step, split::RUN, "total", metric, value);
                }
            }
            Event::ConfigChanged { step, change } => self.push_event(
                *step,
                "config",
                change.key(),
                &change.before_text(),
                &change.after_text(),
            ),
            Event::Projection(frame) => self.write_projection(frame)?,
            Event::Step(s) => self.record_step(s),
            Event::Eval(e) => self.record_eval(e),
            Event::Embedding(e) => self.record_embedding(e),
            Event::System(s) => self.record_system(s),
            Event::Reference(r) => {
                for s in &r.splits {
                    for (i, group) in ["frequent", "medium", "rare", "total"].iter().enumerate() {
                        for (metric, values) in
                            [("ref_ppl", &s.kn3), ("ref_unigram_ppl", &s.unigram)]
                        {
                            if let Some(&v) = values.get(i) {
                                self.push_metric(r.step, &s.split, group, metric, v);
                            }
                        }
                    }
                }
            }
            // A repeat that changed nothing is not recorded again.
            Event::Applied(a) if a.coalesced => {}
            Event::Applied(a) => {
                let (kind, detail) = command_kind(&a.command);
                if let Some(kind) = kind {
                    self.push_event(
                        a.step,
                        kind,
                        &detail,
                        &a.change.before_text(),
                        &a.change.after_text(),
                    );
                }
            }
            Event::Rejected {
                step,
                command,
                reason,
                ..
            } => {
                let (_, detail) = command_kind(command);
                self.push_event(*step, "rejected", &format!("{detail}: {reason}"), "", "");
            }
            Event::Checkpoint { step, path } => {
                self.push_event(*step, "checkpoint", &path.display().to_string(), "", "")
            }
            Event::Diverged { step, loss } => {
                self.push_event(*step, "nan", &format!("loss {loss}"), "", "")
            }
            Event::WeightsBroken { step, reason } => {
                self.push_event(*step, WEIGHTS_BROKEN, reason, "", "")
            }
            // Typed in its columns: the measure and the steps in `detail`, the value and the
            // bound in `before`/`after` (round-trip floats), read back by `history`.
            Event::WorseThanUniform {
                step,
                measure,
                value,
                bound,
                steps,
            } => self.push_event(
                *step,
                WORSE_THAN_UNIFORM,
                &format!("{}; {steps} steps", measure.name()),
                &format!("{value:?}"),
                &format!("{bound:?}"),
            ),
            Event::Warning { step, message } => self.push_event(*step, "warning", message, "", ""),
            Event::Finished { step, reason } => {
                self.push_event(*step, "finish", reason.name(), "", "");
                return Ok(true);
            }
            Event::Failed { step, message } => {
                self.push_event(*step, "failed", message, "", "");
                return Ok(true);
            }
            // Pause/resume are recorded from their acknowledgement; snapshots are W itself; a
            // staged checkpoint is recorded once it is committed (as a checkpoint); an
            // evaluation's progress ends in its result.
            Event::Paused { .. }
            | Event::Resumed { .. }
            | Event::Snapshot { .. }
            | Event::CheckpointStaged { .. }
            | Event::EvalProgress { .. }
            // Already in the store: read back from it.
            | Event::Recorded(_) => {}
        }
        Ok(false)
    }

    fn record_step(&mut self, s: &StepStats) {
        self.epoch = s.epoch;
        let t = unix_now();
        let mut put = |metric: &str, value: f64| {
            self.metrics
                .push(s.step, s.epoch, t, split::TRAIN, "total", metric, value)
        };
        put("loss", s.loss);
        put("penalty", s.penalty);
        put("lr", s.lr);
        put("grad_norm", s.grad_norm);
        put("tokens_per_sec", s.tokens_per_sec);
        put("step_ms", s.step_ms);
        if let Some(r) = s.rare_tokens {
            put("rare_tokens", r as f64);
        }
        if let Some(n) = s.rare_in_group {
            put("rare_in_group", n as f64);
        }
        if let Some(g) = s.rare_g1 {
            put("rare_g1", g);
        }
    }

    fn record_eval(&mut self, e: &EvalStats) {
        let (step, epoch, t) = (e.step, self.epoch, unix_now());
        let split = e.split.as_str();
        let o = &e.outputs;
        for (metric, value) in [
            ("loss", e.loss),
            ("ppl", e.ppl),
            ("positions", e.positions as f64),
            ("seconds", e.seconds),
            ("uniq", o.uniq as f64),
            ("human_uniq", o.human_uniq as f64),
            ("mu_z", o.mu_z),
            ("sigma_z", o.sigma_z),
            ("unnormalised_ppl", o.unnormalised_ppl),
            ("entropy_log_z_corr", o.entropy_log_z_corr),
            // Not applicable without a cosine regulariser: stored as NaN, read back as "n/a".
            (
                "theorem2_threshold",
                o.theorem2_threshold.unwrap_or(f64::NAN),
            ),
            ("theorem2_gamma", o.theorem2_gamma),
            ("block_length", o.block_length as f64),
        ] {
            self.metrics
                .push(step, epoch, t, split, "total", metric, value);
        }
        // The entropy–log Z histogram (the Self-norm pane of a finished run): its ranges, bins,
        // and the non-empty cells.
        let h = &o.histogram;
        for (metric, value) in [
            (HIST_ENTROPY_LO, h.entropy_range[0]),
            (HIST_ENTROPY_HI, h.entropy_range[1]),
            (HIST_LOG_Z_LO, h.log_z_range[0]),
            (HIST_LOG_Z_HI, h.log_z_range[1]),
            (HIST_ENTROPY_BINS, h.entropy_bins as f64),
            (HIST_LOG_Z_BINS, h.log_z_bins as f64),
        ] {
            self.metrics
                .push(step, epoch, t, split, "total", metric, value);
        }
        for (i, &count) in h.counts.iter().enumerate() {
            if count > 0 {
                self.metrics
                    .push(step, epoch, t, split, "total", &hist_cell(i), count as f64);
            }
        }
        if let Some(h) = &e.hidden {
            for (metric, value) in [
                (H_POSITIONS, h.positions as f64),
                (H_MEAN_COS, h.mean_cos),
                (H_ISOSCORE, h.isoscore),
                (H_SEPARABLE, if h.separable { 1.0 } else { 0.0 }),
                (H_MARGIN, h.margin),
                (H_CERTIFICATE, h.certificate),
                (H_PROVEN, if h.proven { 1.0 } else { 0.0 }),
                (H_SUPPORT, h.support as f64),
                (H_NEG_U_RARE_COS, h.neg_u_rare_cos),
            ] {
                self.metrics
                    .push(step, epoch, t, split, "total", metric, value);
            }
            for (g, name) in GROUPS[1..].iter().enumerate() {
                let sim = h.self_sim.get(g).copied().unwrap_or(f64::NAN);
                self.metrics
                    .push(step, epoch, t, split, name, H_SELF_SIM, sim);
                let types = h.self_sim_types[g] as f64;
                self.metrics
                    .push(step, epoch, t, split, name, H_SELF_SIM_TYPES, types);
            }
        }
        for (g, name) in o.groups.iter().zip(&GROUPS[1..]) {
            for (metric, value) in [
                ("ppl", g.ppl),
                ("positions", g.positions as f64),
                ("uniq", g.uniq as f64),
                ("human_uniq", g.human_uniq as f64),
                (
                    "theorem2_below",
                    g.theorem2_below.map_or(f64::NAN, |c| c as f64),
                ),
                ("tokens", g.tokens as f64),
            ] {
                self.metrics
                    .push(step, epoch, t, split, name, metric, value);
            }
        }
    }

    fn record_system(&mut self, s: &SystemStats) {
        const MIB: f64 = 1024.0 * 1024.0;
        let (step, epoch, t) = (s.step, self.epoch, unix_now());
        for (metric, value) in [
            (SYS_CPU_PERCENT, s.cpu_percent),
            (SYS_RSS_MIB, s.rss_bytes as f64 / MIB),
            (SYS_HOST_USED_MIB, s.host_used_bytes as f64 / MIB),
            (SYS_HOST_TOTAL_MIB, s.host_total_bytes as f64 / MIB),
        ]
        .into_iter()
        .chain(s.gpu.iter().flat_map(|g| {
            [
                (SYS_GPU_UTIL_PERCENT, g.util_percent),
                (SYS_GPU_MEM_USED_MIB, g.mem_used_bytes as f64 / MIB),
                (SYS_GPU_MEM_TOTAL_MIB, g.mem_total_bytes as f64 / MIB),
                (SYS_GPU_POWER_W, g.power_watts),
                (SYS_GPU_TEMP_C, g.temp_c),
            ]
        })) {
            if value.is_finite() {
                self.metrics
                    .push(step, epoch, t, split::SYSTEM, "total", metric, value);
            }
        }
    }

    fn record_embedding(&mut self, e: &EmbeddingStats) {
        let (step, epoch, t) = (e.step, self.epoch, unix_now());
        let sets = std::iter::once(&e.total).chain(e.groups.iter());
        for (s, name) in sets.zip(GROUPS) {
            for (metric, value) in set_metrics(s) {
                self.metrics
                    .push(step, epoch, t, split::EMBEDDING, name, metric, value);
            }
        }
        for (metric, value) in [
            ("rare_frequent_cos", e.rare_frequent_cos),
            ("seconds", e.seconds),
        ] {
            self.metrics
                .push(step, epoch, t, split::EMBEDDING, "total", metric, value);
        }
        if let Some(s) = &e.second_tier {
            for (g, name) in GROUPS[1..].iter().enumerate() {
                let at = |v: &[f64]| v.get(g).copied().unwrap_or(f64::NAN);
                let count = |v: &[usize]| v.get(g).map_or(f64::NAN, |&c| c as f64);
                for (metric, value) in [
                    (ST_SAME_GROUP, at(&s.same_group)),
                    (ST_TWO_NN, at(&s.two_nn)),
                    (ST_TWO_NN_DUPLICATES, count(&s.two_nn_duplicates)),
                    (ST_STOLEN_AT_MOST, count(&s.stolen_at_most)),
                ] {
                    self.metrics
                        .push(step, epoch, t, split::EMBEDDING, name, metric, value);
                }
            }
            let stolen: usize = s.stolen_at_most.iter().sum();
            for (metric, value) in [(ST_STOLEN_AT_MOST, stolen as f64), (ST_SECONDS, s.seconds)] {
                self.metrics
                    .push(step, epoch, t, split::EMBEDDING, "total", metric, value);
            }
        }
        if let Some(s) = &e.spectral {
            for (metric, value) in [
                (SC_PRIOR_GAP, s.prior_gap()),
                (SC_SIGMA_VS_W, s.sigma_vs_w),
                (SC_U_ORTH, s.u_orth),
                (SC_V_ORTH, s.v_orth),
                (SC_SIGMA_MAX, s.sigma.first().copied().unwrap_or(f64::NAN)),
                (
                    SC_TARGET_MAX,
                    s.targets.first().copied().unwrap_or(f64::NAN),
                ),
            ] {
                self.metrics
                    .push(step, epoch, t, split::EMBEDDING, "total", metric, value);
            }
        }
        for (k, &sv) in e.total.sv_norm.iter().enumerate() {
            self.metrics.push(
                step,
                epoch,
                t,
                split::SPECTRUM,
                "total",
                &spectrum_metric(k),
                sv,
            );
        }
    }
}

/// The run's system sample (`system/total/…`): the process's CPU share of one core, its resident
/// memory and the host's memory in use and in all, MiB.
pub const SYS_CPU_PERCENT: &str = "cpu_percent";
pub const SYS_RSS_MIB: &str = "rss_mib";
pub const SYS_HOST_USED_MIB: &str = "host_used_mib";
pub const SYS_HOST_TOTAL_MIB: &str = "host_total_mib";
/// The run's CUDA device (NVML): utilisation %, memory used and in all (MiB), power (W), °C.
pub const SYS_GPU_UTIL_PERCENT: &str = "gpu_util_percent";
pub const SYS_GPU_MEM_USED_MIB: &str = "gpu_mem_used_mib";
pub const SYS_GPU_MEM_TOTAL_MIB: &str = "gpu_mem_total_mib";
pub const SYS_GPU_POWER_W: &str = "gpu_power_w";
pub const SYS_GPU_TEMP_C: &str = "gpu_temp_c";

/// The second tier of a snapshot, where it was due (`embedding/GROUP/…`): the mean same-group
/// share of the top-10 cosine neighbours, TwoNN dimension and its duplicates left out, the cheap
/// test's upper bound on stolen rows (also `total`), and the tier's seconds (`total`).
pub const ST_SAME_GROUP: &str = "nbr_same_group";
pub const ST_TWO_NN: &str = "two_nn";
pub const ST_TWO_NN_DUPLICATES: &str = "two_nn_duplicates";
pub const ST_STOLEN_AT_MOST: &str = "stolen_at_most";
pub const ST_SECONDS: &str = "second_tier_seconds";

/// Spectrum control's numbers at a snapshot (`embedding/total/…`, only while it is on):
/// ‖σ − t‖/‖t‖, max_k |σ_(k) − s_k(W)|/s_1(W), ‖UᵀU − I‖_F, ‖VᵀV − I‖_F, σ_1 and t_1.
pub const SC_PRIOR_GAP: &str = "sc_prior_gap";
pub const SC_SIGMA_VS_W: &str = "sc_sigma_vs_w";
pub const SC_U_ORTH: &str = "sc_u_orth";
pub const SC_V_ORTH: &str = "sc_v_orth";
pub const SC_SIGMA_MAX: &str = "sc_sigma_max";
pub const SC_TARGET_MAX: &str = "sc_target_max";

/// The hidden-state geometry of an evaluation (`SPLIT/total/…`, `conelab_metrics::hidden`): the
/// sample's size, mean pairwise cosine and IsoScore; separable (1) or not (0), the margin, the
/// certificate's check, the minimum-norm point's support, cos(−u, mean Rare row).
pub const H_POSITIONS: &str = "h_positions";
pub const H_MEAN_COS: &str = "h_mean_cos";
pub const H_ISOSCORE: &str = "h_isoscore";
pub const H_SEPARABLE: &str = "h_separable";
pub const H_MARGIN: &str = "h_margin";
pub const H_CERTIFICATE: &str = "h_certificate";
pub const H_SUPPORT: &str = "h_support";
/// 1 where the certificate was checked against the rows and holds (and Wolfe converged).
pub const H_PROVEN: &str = "h_proven";
pub const H_NEG_U_RARE_COS: &str = "h_neg_u_rare_cos";
/// Per group of the input token (`SPLIT/GROUP/…`): self-similarity and the types behind it.
pub const H_SELF_SIM: &str = "h_self_sim";
pub const H_SELF_SIM_TYPES: &str = "h_self_sim_types";

/// Metric names of the entropy–log Z histogram of an evaluation.
pub const HIST_ENTROPY_LO: &str = "hist_entropy_lo";
pub const HIST_ENTROPY_HI: &str = "hist_entropy_hi";
pub const HIST_LOG_Z_LO: &str = "hist_log_z_lo";
pub const HIST_LOG_Z_HI: &str = "hist_log_z_hi";
pub const HIST_ENTROPY_BINS: &str = "hist_entropy_bins";
pub const HIST_LOG_Z_BINS: &str = "hist_log_z_bins";
/// Prefix of a histogram cell's metric name (`hist/0042`: cell 42 of `counts`).
pub const HIST_CELL: &str = "hist/";

/// The metric name of histogram cell `i`.
pub fn hist_cell(i: usize) -> String {
    format!("{HIST_CELL}{i:04}")
}

fn set_metrics(s: &SetStats) -> [(&'static str, f64); 15] {
    [
        ("isoscore_random", s.isoscore_random),
        ("i1", s.i1),
        ("i2", s.i2),
        ("i1_unit", s.i1_unit),
        ("i2_unit", s.i2_unit),
        ("isoscore", s.isoscore),
        ("mean_cos", s.mean_cos),
        ("mean_cos_to_mean", s.mean_cos_to_mean),
        ("mean_norm", s.mean_norm),
        ("effective_rank", s.effective_rank),
        ("sv_max", s.sv_max),
        ("rows", s.rows as f64),
        ("abtt_top_variance", s.abtt_top_variance),
        ("abtt_mean_cos", s.abtt_mean_cos),
        ("rogue_share", s.rogue_share),
    ]
}

/// The event kind of an acknowledged command and a description; `None` for commands whose
/// outcome is its own event (a checkpoint).
fn command_kind(command: &Command) -> (Option<&'static str>, String) {
    let kind = match command {
        Command::Pause => Some("pause"),
        Command::Resume => Some("resume"),
        Command::Stop { .. } => Some("stop"),
        Command::SaveCheckpoint => None,
        Command::SetLr { .. } => Some("lr"),
        Command::Objective { change } => Some(match change {
            ObjectiveChange::Enable { on: true, .. } => "regulariser on",
            ObjectiveChange::Enable { on: false, .. } => "regulariser off",
            ObjectiveChange::Weight { .. } => "weight",
            ObjectiveChange::Loss { .. } => "loss",
            ObjectiveChange::Freeze { frozen: true, .. } => "freeze",
            ObjectiveChange::Freeze { frozen: false, .. } => "unfreeze",
            ObjectiveChange::GateFreeze { .. } => "gate-freeze",
            ObjectiveChange::Set { .. } => "objectives",
        }),
    };
    (kind, command.to_string())
}

fn is_already_exists(e: &StoreError) -> bool {
    matches!(e, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
}

/// The store takes every event; one it cannot write is said by the recorder, and the rows stay
/// buffered for the next flush.
impl conelab_core::events::EventSink for StoreWriter {
    type Error = StoreError;
    fn on_event(&mut self, event: &Event) -> Result<(), StoreError> {
        self.record(event).map(|_final| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::OBJECTIVE_CHANGE_KINDS;
    use conelab_core::objective::{GateParts, LossKind, Term};
    use conelab_data::Group;

    /// Every objective change is recorded under a kind that the readers of the objective in
    /// force (`query::objective_at`: exports, `conelab runs`) recognise.
    #[test]
    fn every_objective_change_has_a_kind_the_readers_know() {
        let changes = [
            ObjectiveChange::Enable {
                term: Term::Cos,
                on: true,
            },
            ObjectiveChange::Enable {
                term: Term::Cos,
                on: false,
            },
            ObjectiveChange::Weight {
                term: Term::Agg,
                weight: 0.01,
            },
            ObjectiveChange::Loss {
                kind: LossKind::Nce,
                squash: false,
            },
            ObjectiveChange::Freeze {
                group: Group::Rare,
                frozen: true,
            },
            ObjectiveChange::Freeze {
                group: Group::Rare,
                frozen: false,
            },
            ObjectiveChange::GateFreeze {
                parts: GateParts::B,
            },
            ObjectiveChange::Set {
                objectives: Box::default(),
            },
        ];
        let mut kinds = Vec::new();
        for change in changes {
            let (kind, _) = command_kind(&Command::Objective { change });
            let kind = kind.expect("an objective change is an event of its own");
            assert!(OBJECTIVE_CHANGE_KINDS.contains(&kind), "{kind}");
            kinds.push(kind);
        }
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), OBJECTIVE_CHANGE_KINDS.len());
    }
}
