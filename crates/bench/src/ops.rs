//! `conelab bench ops`: the top-level ATen operators one training step dispatches, by kind, beside
//! PyTorch's for the same model (`bench/reference_torch.py --count-ops`), with the ratio. The
//! figure the GPU engine's fusions move, measurable on LibTorch CPU: the trainer takes the paths a
//! CUDA device takes (`Trainer::use_device_paths`), so it counts what a GPU would launch.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use conelab_core::model::{DeviceSpec, ModelConfig};
use conelab_core::objective::Objectives;
use conelab_core::train_config::Precision;
use conelab_train::aten::{OpCountError, OpCounts, count_ops};
use conelab_train::engine::EngineError;

use crate::random_trainer;

/// What kind of work each ATen operator is (`bench/op_kinds.tsv`, which the Python reference
/// reads too, so both sides sort their operators the same way).
const OP_KINDS: &str = include_str!("../../../bench/op_kinds.tsv");

/// The kinds, in the order the table prints them.
pub const KINDS: [&str; 5] = ["matmul", "fused", "reduction", "elementwise", "view"];

/// The kind of an ATen operator: the first rule of `bench/op_kinds.tsv` that names it (exactly,
/// or by a prefix ending in `*`); elementwise when none does.
pub fn kind_of(op: &str) -> &'static str {
    for line in OP_KINDS.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((pattern, kind)) = line.split_once('\t') else {
            continue;
        };
        let hit = match pattern.strip_suffix('*') {
            Some(prefix) => op.starts_with(prefix),
            None => op == pattern,
        };
        if hit {
            return kind;
        }
    }
    "elementwise"
}

/// One engine's operators per step: by name, and summed by kind.
#[derive(Debug, Clone, Serialize)]
pub struct OpSummary {
    pub engine: String,
    pub total: u64,
    /// Operators that launch a kernel: all but the views (and allocations).
    pub kernels: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub by_name: OpCounts,
}

impl OpSummary {
    /// The `n` operators dispatched most, as `name count, …` (ties by name).
    pub fn most(&self, n: usize) -> String {
        let mut ops: Vec<(&String, &u64)> = self.by_name.iter().collect();
        ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        ops.iter()
            .take(n)
            .map(|(name, count)| format!("{} {count}", name.trim_start_matches("aten::")))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn new(engine: impl Into<String>, by_name: OpCounts) -> Self {
        let mut by_kind = BTreeMap::new();
        for (name, n) in &by_name {
            *by_kind.entry(kind_of(name).to_owned()).or_insert(0) += n;
        }
        let total = by_name.values().sum();
        let kernels = total - by_kind.get("view").copied().unwrap_or(0);
        Self {
            engine: engine.into(),
            total,
            kernels,
            by_kind,
            by_name,
        }
    }
}

/// `bench/reference_torch.py --mode`: from the way conelab composes a step today to what a user
/// would run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReferenceMode {
    /// Attention, layer norm and cross-entropy from their parts; AdamW and clipping per tensor.
    Composed,
    /// PyTorch eager as users write it: SDPA attention, foreach AdamW and clipping.
    Fp32,
    /// fp32's model under bf16 autocast, with the fused AdamW.
    Bf16,
    /// bf16 with torch.compile.
    Compile,
}

impl ReferenceMode {
    pub fn name(self) -> &'static str {
        match self {
            ReferenceMode::Composed => "composed",
            ReferenceMode::Fp32 => "fp32",
            ReferenceMode::Bf16 => "bf16",
            ReferenceMode::Compile => "compile",
        }
    }
}

/// Where the PyTorch reference runs.
#[derive(Debug, Clone)]
pub struct TorchReference {
    /// A Python with torch (`CONELAB_TORCH_PYTHON` from scripts/setup-libtorch.sh).
    pub python: PathBuf,
    /// `bench/reference_torch.py`.
    pub script: PathBuf,
    pub mode: ReferenceMode,
}

impl TorchReference {
    /// The reference could not be counted, and why.
    fn refused(&self, why: String) -> OpsBenchError {
        OpsBenchError::Reference {
            what: format!("{} {}", self.python.display(), self.script.display()),
            why,
        }
    }
}

#[derive(Debug, Clone)]
pub struct OpsBench {
    pub model_name: String,
    pub model: ModelConfig,
    pub device: DeviceSpec,
    pub batch: usize,
    pub vocab: usize,
    /// Steps before the counted one (LibTorch's first steps allocate and pick kernels).
    pub warmup: u64,
    pub seed: u64,
    /// The step's objective (`--reg`); the reference is always plain MLE.
    pub objectives: Objectives,
    pub reference: Option<TorchReference>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpsBenchError {
    #[error("bench ops counts LibTorch's operators: use --device libtorch-cpu (or cuda), not {0}")]
    NotLibtorch(DeviceSpec),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Count(#[from] OpCountError),
    #[error("the objective: {0}")]
    Objectives(String),
    #[error("the PyTorch reference ({what}): {why}")]
    Reference { what: String, why: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct OpsBenchResult {
    pub model: String,
    pub device: String,
    pub batch: usize,
    pub window: usize,
    pub vocab: usize,
    /// conelab's objective (`MLE`, `MLE + UL α=0.5`, …); the reference's is MLE.
    pub objective: String,
    pub conelab: OpSummary,
    pub reference: Option<OpSummary>,
}

/// Counts one training step of conelab (on the device paths) and, where asked, of the reference.
pub fn bench_ops(b: &OpsBench) -> Result<OpsBenchResult, OpsBenchError> {
    if !matches!(b.device, DeviceSpec::LibtorchCpu | DeviceSpec::Cuda(_)) {
        return Err(OpsBenchError::NotLibtorch(b.device));
    }
    // A missing script is said before a minute of training, not after.
    if let Some(r) = &b.reference
        && !r.script.is_file()
    {
        return Err(
            r.refused("no such script (run from the repository, or give --reference PATH)".into())
        );
    }
    let window = b.model.window();
    let mut trainer = random_trainer(
        &b.model,
        b.device,
        b.batch,
        b.vocab,
        b.seed,
        b.warmup + 1,
        Precision::Fp32,
    )?;
    trainer.use_device_paths();
    trainer
        .set_objectives(b.objectives.clone())
        .map_err(|e| OpsBenchError::Objectives(e.to_string()))?;
    let vocab = trainer.corpus().vocab().len();
    for _ in 0..b.warmup {
        trainer.train_step()?;
    }
    let (stepped, counts) = count_ops(|| trainer.train_step())?;
    stepped?;
    let reference = match &b.reference {
        Some(r) => Some(reference_ops(b, r, window)?),
        None => None,
    };
    Ok(OpsBenchResult {
        model: b.model_name.clone(),
        device: b.device.to_string(),
        batch: b.batch,
        window,
        vocab,
        objective: b.objectives.label(),
        conelab: OpSummary::new("conelab", counts),
        reference,
    })
}

/// Runs the reference script with `--count-ops --json` and reads its operators by name (their
/// kinds are summed here, by the same table).
fn reference_ops(
    b: &OpsBench,
    r: &TorchReference,
    window: usize,
) -> Result<OpSummary, OpsBenchError> {
    let fail = |why: String| r.refused(why);
    let device = match b.device {
        DeviceSpec::Cuda(n) => format!("cuda:{n}"),
        _ => "cpu".into(),
    };
    let out = Command::new(&r.python)
        .arg(&r.script)
        .args([
            "--model",
            &b.model_name,
            "--mode",
            r.mode.name(),
            "--device",
            &device,
        ])
        .args([
            "--batch",
            &b.batch.to_string(),
            "--bptt",
            &window.to_string(),
        ])
        .args([
            "--vocab",
            &b.vocab.to_string(),
            "--seed",
            &b.seed.to_string(),
        ])
        .args(["--warmup", &b.warmup.to_string(), "--steps", "1"])
        .args(["--count-ops", "--json"])
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let last = said
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(fail(format!("exited with {}: {last}", out.status)));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| fail(format!("unreadable JSON: {e}")))?;
    let engine = json["engine"].as_str().unwrap_or("pytorch").to_owned();
    let by_name = json["ops"]["by_name"]
        .as_object()
        .ok_or_else(|| fail("no ops.by_name in its JSON".into()))?
        .iter()
        .map(|(k, v)| {
            v.as_u64()
                .map(|n| (k.clone(), n))
                .ok_or_else(|| fail(format!("count of {k} is not a whole number")))
        })
        .collect::<Result<OpCounts, _>>()?;
    Ok(OpSummary::new(
        format!("{engine} {}", r.mode.name()),
        by_name,
    ))
}

impl OpsBenchResult {
    pub fn render(&self) -> String {
        let mut out = format!(
            "top-level ATen operators of one training step: {} on {} (CUDA's paths), B={} T={} N={}, {}{}\n",
            self.model,
            self.device,
            self.batch,
            self.window,
            self.vocab,
            self.objective,
            if self.reference.is_some() && self.objective != "MLE" {
                " (the reference: MLE)"
            } else {
                ""
            }
        );
        let reference = self.reference.as_ref();
        let width = reference.map_or(0, |r| r.engine.chars().count().max(9));
        out.push_str(&format!(
            "{:<12} {:>9} {:>width$} {:>7}\n",
            "kind",
            "conelab",
            reference.map_or("", |r| r.engine.as_str()),
            reference.map_or("", |_| "ratio")
        ));
        let ours = &self.conelab;
        let row = |out: &mut String, label: &str, mine: u64, theirs: Option<u64>| {
            let ratio = match theirs {
                Some(t) if t > 0 => format!("{:.2}×", mine as f64 / t as f64),
                Some(_) => "–".into(),
                None => String::new(),
            };
            let theirs = theirs.map(|t| t.to_string()).unwrap_or_default();
            out.push_str(&format!(
                "{label:<12} {mine:>9} {theirs:>width$} {ratio:>7}\n"
            ));
        };
        for kind in KINDS {
            let get = |s: &OpSummary| s.by_kind.get(kind).copied().unwrap_or(0);
            row(&mut out, kind, get(ours), reference.map(get));
        }
        row(&mut out, "total", ours.total, reference.map(|r| r.total));
        row(
            &mut out,
            "kernels",
            ours.kernels,
            reference.map(|r| r.kernels),
        );
        for s in std::iter::once(ours).chain(reference) {
            out.push_str(&format!("most dispatched by {}: {}\n", s.engine, s.most(8)));
        }
        out.push_str("kernels: all but views and allocations; kinds: bench/op_kinds.tsv\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_name_prefix_and_default() {
        assert_eq!(kind_of("aten::addmm"), "matmul");
        assert_eq!(kind_of("aten::_foreach_mul_"), "fused");
        assert_eq!(kind_of("aten::native_layer_norm_backward"), "fused");
        assert_eq!(kind_of("aten::sum"), "reduction");
        assert_eq!(kind_of("aten::empty_strided"), "view");
        // Not listed, and a plain name is not a prefix.
        assert_eq!(kind_of("aten::mul"), "elementwise");
        assert_eq!(kind_of("aten::summary"), "elementwise");
        // Every kind the table uses is one the report prints.
        for line in OP_KINDS
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (_, kind) = line.split_once('\t').expect("OPERATOR<TAB>KIND");
            assert!(KINDS.contains(&kind), "{line}");
        }
    }

    #[test]
    fn a_summary_adds_up_and_the_table_shows_the_ratio() {
        let counts = |pairs: &[(&str, u64)]| -> OpCounts {
            pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
        };
        let ours = OpSummary::new(
            "conelab",
            counts(&[("aten::mm", 6), ("aten::view", 4), ("aten::mul", 10)]),
        );
        assert_eq!((ours.total, ours.kernels), (20, 16));
        assert_eq!(ours.by_kind.get("matmul"), Some(&6));
        let theirs = OpSummary::new("pytorch fp32", counts(&[("aten::mm", 3), ("aten::add", 5)]));
        let r = OpsBenchResult {
            model: "tiny".into(),
            device: "libtorch-cpu".into(),
            batch: 2,
            window: 8,
            vocab: 50,
            objective: "MLE + UL α=0.5".into(),
            conelab: ours,
            reference: Some(theirs),
        };
        let text = r.render();
        // The reference's objective is said where conelab's is not MLE.
        assert!(
            text.lines()
                .next()
                .is_some_and(|l| l.ends_with("N=50, MLE + UL α=0.5 (the reference: MLE)")),
            "{text}"
        );
        let line = |label: &str| {
            text.lines()
                .find(|l| l.starts_with(label))
                .unwrap_or_else(|| panic!("no {label} row in\n{text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert_eq!(line("matmul"), ["matmul", "6", "3", "2.00×"]);
        assert_eq!(line("elementwise"), ["elementwise", "10", "5", "2.00×"]);
        assert_eq!(line("view"), ["view", "4", "0", "–"]);
        assert_eq!(line("total"), ["total", "20", "8", "2.50×"]);
        assert_eq!(line("kernels"), ["kernels", "16", "8", "2.00×"]);
        assert!(
            text.contains("most dispatched by conelab: mul 10, mm 6, view 4"),
            "{text}"
        );
    }

    #[test]
    fn the_flex_device_is_refused() {
        let b = OpsBench {
            model_name: "tiny".into(),
            model: conelab_core::model::Preset::Tiny.config(),
            device: DeviceSpec::Cpu,
            batch: 2,
            vocab: 50,
            warmup: 0,
            seed: 1,
            objectives: Objectives::default(),
            reference: None,
        };
        let e = bench_ops(&b).expect_err("flex has no ATen operators");
        assert!(e.to_string().contains("--device libtorch-cpu"), "{e}");
    }

    #[test]
    fn a_missing_reference_script_is_said_before_any_training() {
        let b = OpsBench {
            model_name: "tiny".into(),
            model: conelab_core::model::Preset::Tiny.config(),
            device: DeviceSpec::LibtorchCpu,
            batch: 2,
            vocab: 50,
            warmup: 0,
            seed: 1,
            objectives: Objectives::default(),
            reference: Some(TorchReference {
                python: "python3".into(),
                script: "/nonexistent/reference_torch.py".into(),
                mode: ReferenceMode::Fp32,
            }),
        };
        // In a build without LibTorch the trainer would fail too: the script is checked first.
        let e = bench_ops(&b).expect_err("no script");
        assert!(
            matches!(e, OpsBenchError::Reference { .. })
                && e.to_string().contains("no such script"),
            "{e}"
        );
    }
}
