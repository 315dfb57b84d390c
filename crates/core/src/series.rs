//! The names a metric series goes by — its split, group and metric — as the store writes them
//! and every reader (the viewers, the exports, a Python user) asks for them.

/// The `split` of rows that are not held-out evaluations.
pub mod split {
    pub const TRAIN: &str = "train";
    pub const VALID: &str = "valid";
    pub const TEST: &str = "test";
    pub const EMBEDDING: &str = "embedding";
    /// Normalised singular values of W, metric `sv0000`, `sv0001`, … (group `total`).
    pub const SPECTRUM: &str = "spectrum";
    /// The run process's CPU and memory, the host's memory (`conelab_base::system`).
    pub const SYSTEM: &str = "system";
    /// Facts about the run recorded when it starts: `total_steps`, `windows_per_epoch`,
    /// `parameters`.
    pub const RUN: &str = "run";
}

/// The `group` of a row: the whole vocabulary or one frequency group.
pub const GROUPS: [&str; 4] = ["total", "frequent", "medium", "rare"];

/// The series a metric row belongs to, as a stable 64-bit FNV-1a hash of split, group and metric
/// (stable across processes and versions: it is stored), its bits as an i64 (a polars literal
/// of a u64 above i64::MAX would need 128-bit integers).
pub fn series_key(split: &str, group: &str, metric: &str) -> i64 {
    use conelab_base::hash::{FNV_OFFSET, fnv1a_from};
    // A zero byte between the parts.
    let h = fnv1a_from(FNV_OFFSET, split.as_bytes());
    let h = fnv1a_from(fnv1a_from(h, &[0]), group.as_bytes());
    fnv1a_from(fnv1a_from(h, &[0]), metric.as_bytes()) as i64
}

/// The metric of the spectrum's `k`-th normalised singular value (split `spectrum`).
pub fn spectrum_metric(k: usize) -> String {
    format!("sv{k:04}")
}

/// A series of the store by its names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesName {
    pub split: String,
    pub group: String,
    pub metric: String,
}

impl SeriesName {
    pub fn key(&self) -> i64 {
        series_key(&self.split, &self.group, &self.metric)
    }

    /// Whether a view offers it as a curve: not one singular value of a spectrum, not a fact
    /// recorded once (`run` split), not one histogram bin (`hist/0042`).
    pub fn is_curve(&self) -> bool {
        self.split != split::SPECTRUM && self.split != split::RUN && !self.metric.contains('/')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a over a byte string, written from the definition.
    fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    #[test]
    fn series_keys_are_fnv1a_of_the_parts_joined_by_zero_bytes() {
        // The published test vector of 64-bit FNV-1a.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            series_key("valid", "rare", "ppl"),
            fnv1a(b"valid\0rare\0ppl") as i64
        );
        assert_ne!(series_key("ab", "c", "d"), series_key("a", "bc", "d"));
        assert_eq!(spectrum_metric(7), "sv0007");
    }
}
