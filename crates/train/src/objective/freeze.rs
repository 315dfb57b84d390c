//! Group freezing (Yu et al. 2022, Table 1): the rows of a frozen frequency group stay exactly at
//! their values — bit-identical across steps — until unfrozen.
//!
//! Zeroing their gradient is not enough with AdamW: decoupled weight decay and the momentum of
//! earlier steps still move them. So the step zeroes the frozen rows' gradient (no new momentum
//! accumulates while frozen, and the global clipping norm ignores them) **and** copies the rows
//! back after the optimizer step. Groups are contiguous id ranges (ids are frequency ranks), so
//! both are slice operations.

use std::ops::Range;

use burn::prelude::*;

use conelab_data::{FrequencyGroups, Group};

/// The id ranges of the frozen groups, adjacent ones merged; empty when nothing is frozen.
pub fn frozen_ranges(groups: &FrequencyGroups, frozen: [bool; 3]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (group, on) in Group::ALL.into_iter().zip(frozen) {
        let r = groups.range(group);
        if !on || r.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

/// `grad` `[N, d]` with the rows in `ranges` set to zero.
pub fn zero_rows(grad: Tensor<2>, ranges: &[Range<usize>]) -> Tensor<2> {
    let [_, d] = grad.dims();
    let device = grad.device();
    ranges.iter().fold(grad, |g, r| {
        g.slice_assign([r.clone(), 0..d], Tensor::zeros([r.len(), d], &device))
    })
}

/// `new` `[N, d]` with the rows in `ranges` copied from `old`.
pub fn restore_rows(new: Tensor<2>, old: Tensor<2>, ranges: &[Range<usize>]) -> Tensor<2> {
    let [_, d] = new.dims();
    ranges.iter().fold(new, |w, r| {
        w.slice_assign([r.clone(), 0..d], old.clone().slice([r.clone(), 0..d]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_data::GroupBounds;

    #[test]
    fn ranges_merge_adjacent_groups() {
        let g = FrequencyGroups::new(10, GroupBounds::new(0.3, 0.8).expect("bounds"));
        assert_eq!(frozen_ranges(&g, [false, false, true]), vec![8..10]);
        assert_eq!(frozen_ranges(&g, [false, true, true]), vec![3..10]);
        assert_eq!(frozen_ranges(&g, [true, false, true]), vec![0..3, 8..10]);
        assert!(frozen_ranges(&g, [false; 3]).is_empty());
    }
}
