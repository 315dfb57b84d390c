//! Spectrum control's two questions as numbers: how far σ is from the prior's targets, and how far
//! σ is from the singular values W = U·diag(σ)·Vᵀ actually has (they agree while U and V stay
//! orthonormal).

/// ‖a − b‖₂ / ‖b‖₂ over the common length; NaN when `b` is zero or either is empty.
pub fn relative_gap(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let diff: f64 = a[..n]
        .iter()
        .zip(&b[..n])
        .map(|(x, y)| (x - y).powi(2))
        .sum();
    let base: f64 = b[..n].iter().map(|y| y * y).sum();
    if n == 0 || base == 0.0 {
        return f64::NAN;
    }
    (diff / base).sqrt()
}

/// max_k |a_k − b_k| / b_1, `b` descending (its first entry the scale); NaN when `b` is empty or
/// its first entry is not positive.
pub fn max_deviation_of_scale(a: &[f64], b: &[f64]) -> f64 {
    match b.first() {
        Some(&scale) if scale > 0.0 => {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max)
                / scale
        }
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gaps_by_hand() {
        // ‖(3, 4) − (0, 0)‖ / ‖(0, 0)‖ has no scale; ‖(1, 2) − (1, 0)‖ / ‖(1, 0)‖ = 2.
        assert!(relative_gap(&[3.0, 4.0], &[0.0, 0.0]).is_nan());
        assert_eq!(relative_gap(&[1.0, 2.0], &[1.0, 0.0]), 2.0);
        // (4, 2, 1) against (4, 3, 1): the largest difference 1 over the scale 4.
        assert_eq!(
            max_deviation_of_scale(&[4.0, 2.0, 1.0], &[4.0, 3.0, 1.0]),
            0.25
        );
        assert!(max_deviation_of_scale(&[1.0], &[]).is_nan());
        assert!(relative_gap(&[], &[]).is_nan());
    }
}
