//! Frequency groups (Yu et al. 2022): Frequent / Medium / Rare as rank ranges of the vocabulary.
//!
//! Because ids are frequency ranks, a group is a contiguous id range. Boundaries are
//! `floor(fraction · N)`; tokens with equal counts on either side of a boundary are split by rank
//! (that is, by first occurrence in the training text), so groups are deterministic and their sizes
//! depend only on N.

use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::DataError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    Frequent,
    Medium,
    Rare,
}

impl Group {
    pub const ALL: [Group; 3] = [Group::Frequent, Group::Medium, Group::Rare];

    pub fn name(self) -> &'static str {
        match self {
            Group::Frequent => "frequent",
            Group::Medium => "medium",
            Group::Rare => "rare",
        }
    }
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the Medium and Rare groups start, as fractions of the vocabulary (ranks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupBounds {
    medium_start: f64,
    rare_start: f64,
}

impl Default for GroupBounds {
    /// Yu et al.: frequent 30 %, medium 50 %, rare 20 %.
    fn default() -> Self {
        Self {
            medium_start: 0.3,
            rare_start: 0.8,
        }
    }
}

impl GroupBounds {
    /// Both fractions must lie strictly inside (0, 1) and increase.
    pub fn new(medium_start: f64, rare_start: f64) -> Result<Self, DataError> {
        let given = format!("{medium_start},{rare_start}");
        let inside = |x: f64| x.is_finite() && x > 0.0 && x < 1.0;
        if !inside(medium_start) || !inside(rare_start) {
            return Err(DataError::InvalidGroups {
                given,
                reason: "both boundaries must lie strictly between 0 and 1".into(),
            });
        }
        if medium_start >= rare_start {
            return Err(DataError::InvalidGroups {
                given,
                reason: "the medium boundary must be below the rare boundary".into(),
            });
        }
        Ok(Self {
            medium_start,
            rare_start,
        })
    }

    pub fn medium_start(&self) -> f64 {
        self.medium_start
    }

    pub fn rare_start(&self) -> f64 {
        self.rare_start
    }
}

impl FromStr for GroupBounds {
    type Err = DataError;

    /// `"0.3,0.8"`: where Medium starts, where Rare starts.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| DataError::InvalidGroups {
            given: s.to_owned(),
            reason: reason.to_owned(),
        };
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [a, b] = parts.as_slice() else {
            return Err(bad("expected two fractions, e.g. 0.3,0.8"));
        };
        let a: f64 = a.parse().map_err(|_| bad("not a number"))?;
        let b: f64 = b.parse().map_err(|_| bad("not a number"))?;
        GroupBounds::new(a, b).map_err(|e| match e {
            DataError::InvalidGroups { reason, .. } => bad(&reason),
            other => other,
        })
    }
}

/// The three groups of a vocabulary of `n` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrequencyGroups {
    n: usize,
    medium_start: usize,
    rare_start: usize,
}

/// Size and training-count range of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GroupSummary {
    pub size: usize,
    pub first_rank: usize,
    pub min_count: u64,
    pub max_count: u64,
}

impl FrequencyGroups {
    pub fn new(n: usize, bounds: GroupBounds) -> Self {
        // floor(f·n) of the decimal fraction: f64 rounding can land a hair below an exact integer
        // (0.3·10000 must give 3000, not 2999), so allow for a few ulps before flooring.
        let cut = |f: f64| {
            let x = f * n as f64;
            ((x + x.abs() * 1e-12).floor() as usize).min(n)
        };
        Self {
            n,
            medium_start: cut(bounds.medium_start),
            rare_start: cut(bounds.rare_start),
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn range(&self, group: Group) -> Range<usize> {
        match group {
            Group::Frequent => 0..self.medium_start,
            Group::Medium => self.medium_start..self.rare_start,
            Group::Rare => self.rare_start..self.n,
        }
    }

    pub fn size(&self, group: Group) -> usize {
        self.range(group).len()
    }

    pub fn group_of(&self, id: u32) -> Group {
        let id = id as usize;
        if id < self.medium_start {
            Group::Frequent
        } else if id < self.rare_start {
            Group::Medium
        } else {
            Group::Rare
        }
    }

    /// Size and count range of each group; `counts` are the training counts in id order.
    pub fn summary(&self, counts: &[u64]) -> [(Group, GroupSummary); 3] {
        Group::ALL.map(|g| {
            let r = self.range(g);
            let slice = counts.get(r.clone()).unwrap_or(&[]);
            (
                g,
                GroupSummary {
                    size: r.len(),
                    first_rank: r.start,
                    min_count: slice.iter().copied().min().unwrap_or(0),
                    max_count: slice.iter().copied().max().unwrap_or(0),
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sizes_match_the_papers() {
        let g = FrequencyGroups::new(10_000, GroupBounds::default());
        assert_eq!(Group::ALL.map(|x| g.size(x)), [3_000, 5_000, 2_000]);
        let g = FrequencyGroups::new(33_278, GroupBounds::default());
        assert_eq!(Group::ALL.map(|x| g.size(x)), [9_983, 16_639, 6_656]);
    }

    #[test]
    fn floor_is_exact_for_every_n_at_decimal_fractions() {
        // Independent integer computation of floor(3n/10) and floor(8n/10).
        for n in 0..20_000usize {
            let g = FrequencyGroups::new(n, GroupBounds::default());
            assert_eq!(g.range(Group::Medium).start, 3 * n / 10, "n={n}");
            assert_eq!(g.range(Group::Rare).start, 8 * n / 10, "n={n}");
        }
    }

    #[test]
    fn group_of_agrees_with_ranges() {
        let g = FrequencyGroups::new(17, GroupBounds::new(0.25, 0.5).expect("valid"));
        for grp in Group::ALL {
            for id in g.range(grp) {
                assert_eq!(g.group_of(id as u32), grp);
            }
        }
        assert_eq!(Group::ALL.map(|x| g.size(x)).iter().sum::<usize>(), 17);
    }

    #[test]
    fn bounds_are_validated() {
        for bad in [
            "0.8,0.3",
            "0,0.5",
            "0.3,1",
            "0.5,0.5",
            "x,0.5",
            "0.3",
            "0.1,0.2,0.3",
            "NaN,0.5",
        ] {
            assert!(bad.parse::<GroupBounds>().is_err(), "{bad} accepted");
        }
        assert_eq!(
            "0.3, 0.8".parse::<GroupBounds>().expect("valid"),
            GroupBounds::default()
        );
    }

    #[test]
    fn summary_reports_count_ranges() {
        let counts = [9, 7, 7, 5, 3, 2, 2, 1, 1, 0];
        let g = FrequencyGroups::new(counts.len(), GroupBounds::default());
        let s = g.summary(&counts);
        assert_eq!((s[0].1.min_count, s[0].1.max_count), (7, 9));
        assert_eq!((s[1].1.min_count, s[1].1.max_count), (1, 5));
        assert_eq!((s[2].1.min_count, s[2].1.max_count), (0, 1));
        assert_eq!(s[2].1.first_rank, 8);
    }
}
