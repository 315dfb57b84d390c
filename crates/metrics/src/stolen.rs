//! Stolen probability per frequency group (Demeter et al. 2020; methods.md §2): from the rows'
//! verdicts ([`crate::hull::stolen_rows`], exact, or the cheap test's upper bound), the count and
//! fraction of rows that can never be the argmax in each group, and the Spearman correlation of
//! the row norm with the log training count — the paper's account of why rare rows lose: short
//! rows sit inside the hull of the long ones.

use serde::Serialize;

use crate::hull::RowVerdict;
use crate::matrix::{Embeddings, RowGroups};
use conelab_data::Group;

/// One set's stolen rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StolenCount {
    pub rows: usize,
    /// Rows no h makes the strict argmax.
    pub stolen: usize,
    /// Rows the solver could not decide (its iteration cap): neither count includes them.
    pub undecided: usize,
}

impl StolenCount {
    /// stolen / rows (NaN for an empty set).
    pub fn fraction(&self) -> f64 {
        if self.rows == 0 {
            f64::NAN
        } else {
            self.stolen as f64 / self.rows as f64
        }
    }
}

/// Stolen rows per group (frequent, medium, rare; `None` without groups) and in all.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StolenSummary {
    pub total: StolenCount,
    pub groups: Option<[StolenCount; 3]>,
    /// Spearman ρ between ‖w_i‖ and ln(count_i) over all rows; NaN without counts.
    pub norm_count_spearman: f64,
}

/// Counts `verdicts` (one per row of `w`) per group; `counts` are the training counts by row.
pub fn summarise(
    w: Embeddings<'_>,
    verdicts: &[RowVerdict],
    groups: Option<&RowGroups>,
    counts: Option<&[u64]>,
) -> StolenSummary {
    let count_of = |rows: &mut dyn Iterator<Item = usize>| {
        let mut c = StolenCount {
            rows: 0,
            stolen: 0,
            undecided: 0,
        };
        for i in rows {
            c.rows += 1;
            match verdicts.get(i) {
                Some(RowVerdict::Stolen) => c.stolen += 1,
                Some(RowVerdict::CanWin) => {}
                Some(RowVerdict::Undecided) | None => c.undecided += 1,
            }
        }
        c
    };
    let total = count_of(&mut (0..w.n()));
    let groups = groups.filter(|g| g.len() == w.n()).map(|g| {
        Group::ALL.map(|group| count_of(&mut g.members(group).into_iter().map(|i| i as usize)))
    });
    let norm_count_spearman = match counts {
        Some(c) if c.len() == w.n() => {
            let norms: Vec<f64> = (0..w.n())
                .map(|i| {
                    w.row(i)
                        .iter()
                        .map(|&x| f64::from(x) * f64::from(x))
                        .sum::<f64>()
                        .sqrt()
                })
                .collect();
            // ln is monotone: ρ of the log count is ρ of the count (ties ranked alike).
            let counts: Vec<f64> = c.iter().map(|&k| k as f64).collect();
            spearman(&norms, &counts)
        }
        _ => f64::NAN,
    };
    StolenSummary {
        total,
        groups,
        norm_count_spearman,
    }
}

/// Spearman's ρ: Pearson's correlation of the average ranks (ties share their mean rank). NaN
/// for fewer than two pairs, unequal lengths, a NaN value or a constant side.
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    if x.len() != y.len() || x.len() < 2 || x.iter().chain(y).any(|v| v.is_nan()) {
        return f64::NAN;
    }
    let (rx, ry) = (average_ranks(x), average_ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        return f64::NAN;
    }
    sxy / (sxx * syy).sqrt()
}

/// 1-based ranks, ties given the mean of the ranks they span.
fn average_ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut ranks = vec![0.0; v.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && v[order[end]] == v[order[start]] {
            end += 1;
        }
        // Positions start..end hold ranks start+1..=end: their mean.
        let rank = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = rank;
        }
        start = end;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_data::GroupBounds;

    /// ρ by the textbook's no-ties formula 1 − 6Σd²/(n(n² − 1)), and a tied case by hand.
    #[test]
    fn spearman_matches_hand_computations() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [5.0, 6.0, 7.0, 8.0, 7.5];
        // Ranks of y: 1, 2, 3, 5, 4; d = 0, 0, 0, −1, 1; Σd² = 2; ρ = 1 − 12/120 = 0.9.
        assert!((spearman(&x, &y) - 0.9).abs() < 1e-12);
        assert!((spearman(&x, &x.map(|v| -v)) + 1.0).abs() < 1e-12);
        // Ties: y's ranks are 1.5, 1.5, 3, 4 (mean 2.5); x's 1..4. Pearson of the ranks:
        // Σ(dx·dy) = (−1.5)(−1) + (−0.5)(−1) + 0.5·0.5 + 1.5·1.5 = 4.5; Σdx² = 5; Σdy² = 4.5.
        let rho = spearman(&[1.0, 2.0, 3.0, 4.0], &[7.0, 7.0, 8.0, 9.0]);
        assert!((rho - 4.5 / (5.0f64 * 4.5).sqrt()).abs() < 1e-12);
        assert!(spearman(&[1.0, 2.0], &[3.0, 3.0]).is_nan());
        assert!(spearman(&[1.0], &[3.0]).is_nan());
        assert!(spearman(&[1.0, f64::NAN], &[3.0, 4.0]).is_nan());
    }

    /// Verdicts counted into their groups; the norm–count ρ of rows whose norm grows with the
    /// count is 1.
    #[test]
    fn summary_counts_each_group() {
        let n = 10;
        let data: Vec<f32> = (0..n).flat_map(|i| [(n - i) as f32, 0.0]).collect();
        let w = Embeddings::new(n, 2, &data).unwrap();
        let counts: Vec<u64> = (0..n as u64).map(|i| 100 - i).collect();
        let groups = RowGroups::from_counts(&counts, GroupBounds::default());
        use RowVerdict::*;
        // Rows 0–2 frequent, 3–7 medium, 8–9 rare.
        let verdicts = [
            CanWin, Stolen, CanWin, Stolen, Stolen, CanWin, Undecided, CanWin, Stolen, Stolen,
        ];
        let s = summarise(w, &verdicts, Some(&groups), Some(&counts));
        assert_eq!(
            (s.total.rows, s.total.stolen, s.total.undecided),
            (10, 5, 1)
        );
        let g = s.groups.unwrap();
        assert_eq!((g[0].rows, g[0].stolen), (3, 1));
        assert_eq!((g[1].rows, g[1].stolen, g[1].undecided), (5, 2, 1));
        assert_eq!((g[2].rows, g[2].stolen), (2, 2));
        assert_eq!(g[2].fraction(), 1.0);
        assert!((s.norm_count_spearman - 1.0).abs() < 1e-12);
        assert!(
            summarise(w, &verdicts, None, None)
                .norm_count_spearman
                .is_nan()
        );
    }
}
