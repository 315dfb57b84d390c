//! The matrix the metrics read (row-major `N × d` f32, row i = token i) and which rows form each
//! frequency group.

use conelab_data::{FrequencyGroups, Group, GroupBounds};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MatrixError {
    #[error("matrix data has {len} values, not {n} × {d}")]
    Shape { n: usize, d: usize, len: usize },
    #[error("the matrix is empty ({n} × {d})")]
    Empty { n: usize, d: usize },
    #[error("row {row} has a non-finite value")]
    NonFinite { row: usize },
    #[error("eigendecomposition failed: {0}")]
    Decomposition(String),
    #[error("{what} has {got} entries but the matrix has {n} rows")]
    RowCount { what: String, got: usize, n: usize },
}

/// A borrowed row-major `n × d` matrix of f32.
#[derive(Debug, Clone, Copy)]
pub struct Embeddings<'a> {
    n: usize,
    d: usize,
    data: &'a [f32],
}

impl<'a> Embeddings<'a> {
    /// Checks the shape and that every value is finite (a NaN would silently poison every
    /// statistic).
    pub fn new(n: usize, d: usize, data: &'a [f32]) -> Result<Self, MatrixError> {
        if n.checked_mul(d) != Some(data.len()) {
            return Err(MatrixError::Shape {
                n,
                d,
                len: data.len(),
            });
        }
        if n == 0 || d == 0 {
            return Err(MatrixError::Empty { n, d });
        }
        if let Some(i) = data.iter().position(|v| !v.is_finite()) {
            return Err(MatrixError::NonFinite { row: i / d });
        }
        Ok(Self { n, d, data })
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn d(&self) -> usize {
        self.d
    }

    pub fn data(&self) -> &'a [f32] {
        self.data
    }

    pub fn row(&self, i: usize) -> &'a [f32] {
        &self.data[i * self.d..(i + 1) * self.d]
    }

    pub(crate) fn faer(&self) -> faer::MatRef<'a, f32> {
        faer::MatRef::from_row_major_slice(self.data, self.n, self.d)
    }
}

/// The frequency group of every row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowGroups {
    of_row: Vec<Group>,
}

impl RowGroups {
    /// Rows in frequency-rank order (conelab's own vocabularies).
    pub fn from_ranks(groups: &FrequencyGroups) -> Self {
        let of_row = (0..groups.len() as u32)
            .map(|i| groups.group_of(i))
            .collect();
        Self { of_row }
    }

    /// Rows in any order, with their training counts: ranks by descending count, ties by row
    /// index (the same rule as conelab's vocabulary), then the usual rank boundaries.
    pub fn from_counts(counts: &[u64], bounds: GroupBounds) -> Self {
        let mut order: Vec<usize> = (0..counts.len()).collect();
        order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
        let ranks = FrequencyGroups::new(counts.len(), bounds);
        let mut of_row = vec![Group::Frequent; counts.len()];
        for (rank, &row) in order.iter().enumerate() {
            of_row[row] = ranks.group_of(rank as u32);
        }
        Self { of_row }
    }

    pub fn len(&self) -> usize {
        self.of_row.len()
    }

    pub fn is_empty(&self) -> bool {
        self.of_row.is_empty()
    }

    pub fn group_of(&self, row: usize) -> Group {
        self.of_row[row]
    }

    /// Rows of one group, ascending.
    pub fn members(&self, group: Group) -> Vec<u32> {
        (0..self.of_row.len() as u32)
            .filter(|&i| self.of_row[i as usize] == group)
            .collect()
    }
}

/// The rows `rows` of `w`, borrowed when they are one contiguous run (the usual case: groups are
/// rank ranges), gathered into a copy otherwise.
pub(crate) enum RowSet<'a> {
    Borrowed(Embeddings<'a>),
    Gathered { n: usize, d: usize, data: Vec<f32> },
}

impl<'a> RowSet<'a> {
    pub(crate) fn new(w: Embeddings<'a>, rows: &[u32]) -> Self {
        let d = w.d();
        let contiguous = rows.windows(2).all(|p| p[1] == p[0] + 1);
        if contiguous {
            let start = rows.first().map_or(0, |&r| r as usize);
            let data = &w.data()[start * d..(start + rows.len()) * d];
            return RowSet::Borrowed(Embeddings {
                n: rows.len(),
                d,
                data,
            });
        }
        let mut data = Vec::with_capacity(rows.len() * d);
        for &r in rows {
            data.extend_from_slice(w.row(r as usize));
        }
        RowSet::Gathered {
            n: rows.len(),
            d,
            data,
        }
    }

    pub(crate) fn view(&self) -> Embeddings<'_> {
        match self {
            RowSet::Borrowed(e) => *e,
            RowSet::Gathered { n, d, data } => Embeddings { n: *n, d: *d, data },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_shapes_and_non_finite_values() {
        assert!(matches!(
            Embeddings::new(2, 3, &[0.0; 5]),
            Err(MatrixError::Shape { .. })
        ));
        assert!(matches!(
            Embeddings::new(0, 3, &[]),
            Err(MatrixError::Empty { .. })
        ));
        let mut v = vec![1.0; 6];
        v[4] = f32::NAN;
        assert_eq!(
            Embeddings::new(2, 3, &v).unwrap_err(),
            MatrixError::NonFinite { row: 1 }
        );
    }

    #[test]
    fn groups_from_counts_follow_rank_order() {
        // Row order scrambled: counts rank rows 3, 0, 4, 1, 2 (ties by row index).
        let counts = [50, 7, 7, 90, 8, 1, 1, 3, 60, 2];
        let g = RowGroups::from_counts(&counts, GroupBounds::default());
        // Ranks: 3(90) 8(60) 0(50) | 4(8) 1(7) 2(7) 7(3) 9(2) | 5(1) 6(1)
        assert_eq!(g.members(Group::Frequent), vec![0, 3, 8]);
        assert_eq!(g.members(Group::Medium), vec![1, 2, 4, 7, 9]);
        assert_eq!(g.members(Group::Rare), vec![5, 6]);
        let ranked = RowGroups::from_ranks(&FrequencyGroups::new(10, GroupBounds::default()));
        assert_eq!(ranked.members(Group::Rare), vec![8, 9]);
    }

    #[test]
    fn contiguous_rows_are_borrowed_and_others_gathered() {
        let data: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let w = Embeddings::new(4, 3, &data).unwrap();
        let set = RowSet::new(w, &[1, 2]);
        assert!(matches!(set, RowSet::Borrowed(_)));
        assert_eq!(set.view().data(), &data[3..9]);
        let set = RowSet::new(w, &[0, 3]);
        assert!(matches!(set, RowSet::Gathered { .. }));
        assert_eq!(set.view().data(), &[0.0, 1.0, 2.0, 9.0, 10.0, 11.0]);
    }
}
