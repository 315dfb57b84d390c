//! Degeneration metrics (methods.md §2): pure functions over an embedding matrix and its frequency
//! groups, or over a model's outputs on a split. Nothing here knows about training or the UI.
//!
//! - [`embedding`]: isotropy I1/I2 over E ∪ −E, singular spectrum and effective rank, cone
//!   statistics, 2-D projections — total and per group, from one d×d eigendecomposition per set.
//! - [`neighbors`]: exact cosine (or euclidean) top-k over all N rows; same-class precision@k.
//! - [`outputs`]: per-group perplexity, Uniq, log Z statistics and the Theorem-2 diagnostic from
//!   per-position numbers the evaluator hands in.
//! - [`matrix`]: the row-major matrix view, row groups, and reading foreign matrices.
//! - [`bootstrap`]: 95 % intervals of a split's perplexity, and of two runs' difference, by
//!   resampling its sentences.
//! - [`spectral`]: spectrum control's distance from its prior and from W's own singular values.
//! - [`ngram`]: the reference models of methods.md §4 — unigram and interpolated modified
//!   Kneser–Ney trigram — and their perplexity per group.
//! - [`dominant_directions`]: what a few directions carry — all-but-the-top, rogue dimensions.
//! - [`second_tier`]: the all-pairs measures — TwoNN dimension, neighbour frequency mix.
//! - [`hull`]: Wolfe's minimum-norm point of a convex hull, and what it decides — separability
//!   of hidden states from the origin (with its certificate) and stolen-probability rows (exact,
//!   with a cheap upper bound for the live figure).

pub mod bleu;
pub mod bootstrap;
pub mod chrf;
pub mod dominant_directions;
pub mod embedding;
pub mod fastmath;
pub mod hidden;
pub mod hull;
pub mod matrix;
pub mod neighbors;
pub mod ngram;
pub mod outputs;
pub mod second_tier;
pub mod spectral;
pub mod stolen;

pub use embedding::{EmbeddingPanel, PanelOptions, Projection, ProjectionMode, SetStats};
pub use matrix::{Embeddings, MatrixError, RowGroups};
pub use neighbors::{Neighbor, NeighborIndex, Similarity};
pub use outputs::{OutputAccumulator, OutputBatch, OutputError, OutputMetrics};

/// How many threads a metric may use. The engine's background worker runs sequentially so that
/// it never competes with training for cores; the command-line tools use every core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    Sequential,
    All,
}

impl Threads {
    fn par(self) -> faer::Par {
        match self {
            Threads::Sequential => faer::Par::Seq,
            Threads::All => faer::Par::rayon(0),
        }
    }
}
