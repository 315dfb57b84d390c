//! Hidden-state geometry (methods.md §2, "Measures from later literature"): the vectors h_t the
//! output layer multiplies by Wᵀ, on a fixed sample of an evaluated split — the cause Gao et al.
//! propose for the cone, measured beside the cone itself.
//!
//! - **The sample**: S = 4,096 target places of the split, drawn once by a fixed seed, so every
//!   evaluation sees the same positions ([`HiddenPlan`]).
//! - **Mean pairwise cosine** of the sample, from the unit rows' sum: (‖Σ ĥ‖² − m)/(m(m − 1)).
//! - **IsoScore** of the sample, from its covariance (`isoscore_from_covariance`).
//! - **Self-similarity** (Ethayarajh 2019) per group of the *input* token: the mean cosine between
//!   h of one type at different places, averaged over the group's types, minus the sample's mean
//!   pairwise cosine. Position sampling rarely gives a Rare type two places, so it has its own
//!   sample by type: up to 64 types per group with ≥ 2 places in the split, up to 8 places each.
//! - **Separability** (Gao et al. §4): whether the sampled ĥ_t lie on one side of a hyperplane
//!   through the origin, with its certificate and margin ([`crate::hull::separability`]), and the
//!   cosine between −u, Gao's uniformly negative direction, and the Rare group's mean row of W.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::embedding::isoscore_from_covariance;
use crate::hull::separability;
use crate::matrix::{Embeddings, MatrixError};
use conelab_data::Group;

/// The positions of the geometry sample.
pub const SAMPLE: usize = 4_096;
/// Types per group in the self-similarity sample.
pub const SELF_SIM_TYPES: usize = 64;
/// Places per type in the self-similarity sample.
pub const SELF_SIM_PLACES: usize = 8;
/// The sample's fixed seed: the same split gives the same positions in every run, so runs are
/// compared on the same contexts.
const SEED: u64 = 0x6869_6464_656e; // "hidden"

/// Which target places of a split to keep the hidden states of: the union of the geometry sample
/// and the self-similarity sample, sorted, each place once.
#[derive(Debug, Clone, PartialEq)]
pub struct HiddenPlan {
    /// Target places (1 ≤ t < split length), ascending and distinct: h at place t is the state
    /// after reading token t − 1, scored against token t.
    pub places: Vec<usize>,
    /// Indices into `places` of the geometry sample.
    sample: Vec<usize>,
    /// Per group of the input token, per sampled type, indices into `places`.
    self_sim: [Vec<Vec<usize>>; 3],
}

impl HiddenPlan {
    /// The plan for a split's `tokens`, grouping input tokens by `group_of`.
    pub fn new(tokens: &[u32], group_of: impl Fn(u32) -> Group) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(SEED);
        let targets = tokens.len().saturating_sub(1);
        // Geometry sample: S of the target places 1..=targets, without replacement.
        let mut sample_places = pick(&mut rng, targets, SAMPLE);
        sample_places.iter_mut().for_each(|p| *p += 1);
        // Self-similarity: places by input type (place t reads token t − 1).
        let mut by_type: Vec<(u32, Vec<usize>)> = {
            let mut map: rustc_hash::FxHashMap<u32, Vec<usize>> = Default::default();
            for t in 1..tokens.len() {
                map.entry(tokens[t - 1]).or_default().push(t);
            }
            map.into_iter().filter(|(_, p)| p.len() >= 2).collect()
        };
        // Hash-map order is not an order: sort by type for a reproducible draw.
        by_type.sort_unstable_by_key(|(ty, _)| *ty);
        let mut chosen: [Vec<Vec<usize>>; 3] = Default::default();
        for (g, group) in Group::ALL.into_iter().enumerate() {
            let types: Vec<&(u32, Vec<usize>)> = by_type
                .iter()
                .filter(|(ty, _)| group_of(*ty) == group)
                .collect();
            for k in pick(&mut rng, types.len(), SELF_SIM_TYPES) {
                let places = &types[k].1;
                let mut own: Vec<usize> = pick(&mut rng, places.len(), SELF_SIM_PLACES)
                    .into_iter()
                    .map(|i| places[i])
                    .collect();
                own.sort_unstable();
                chosen[g].push(own);
            }
        }
        let mut places = sample_places.clone();
        places.extend(chosen.iter().flatten().flatten());
        places.sort_unstable();
        places.dedup();
        let index = |p: usize| places.binary_search(&p).unwrap_or(0);
        let sample = sample_places.iter().map(|&p| index(p)).collect();
        let self_sim = chosen.map(|types| {
            types
                .into_iter()
                .map(|own| own.into_iter().map(index).collect())
                .collect()
        });
        HiddenPlan {
            places,
            sample,
            self_sim,
        }
    }

    /// Places in the geometry sample.
    pub fn sample_len(&self) -> usize {
        self.sample.len()
    }
}

/// `k` distinct indices of 0..n (all of them when k ≥ n), sorted: a partial Fisher–Yates shuffle.
fn pick(rng: &mut ChaCha8Rng, n: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    let k = k.min(n);
    for i in 0..k {
        // Lemire's multiply-shift: uniform enough for a sample of ≤ 2³² places.
        let j = i + ((u64::from(rng.next_u32()) * (n - i) as u64) >> 32) as usize;
        all.swap(i, j);
    }
    all.truncate(k);
    all.sort_unstable();
    all
}

/// The hidden-state geometry of one evaluation (methods.md §2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HiddenStats {
    /// Places in the geometry sample.
    pub positions: usize,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub mean_cos: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub isoscore: f64,
    /// Self-similarity per group of the input token (frequent, medium, rare); NaN for a group
    /// without a type of two places.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub self_sim: Vec<f64>,
    /// Types behind each group's self-similarity.
    pub self_sim_types: [usize; 3],
    /// The sampled ĥ_t lie strictly on one side of a hyperplane through the origin.
    pub separable: bool,
    /// ‖p*‖, the distance of the hull of ĥ from the origin (0 when not separable).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub margin: f64,
    /// The certificate, checked independently of the solver: min_t u·ĥ_t when separable (the
    /// true margin lies between it and `margin`, a Wolfe tolerance apart), ‖Σ λ_t ĥ_t‖ of the
    /// convex weights when not (≈ 0).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub certificate: f64,
    /// The certificate holds (checked from the rows, not taken from the solver) and, for "not
    /// separable", the solver converged: false means the verdict is not proven.
    pub proven: bool,
    /// Places with a non-zero weight in the minimum-norm point.
    pub support: usize,
    /// cos(−u, mean Rare row of W): Gao's uniformly negative direction against where the rare
    /// rows are; NaN when not separable.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub neg_u_rare_cos: f64,
    /// u itself (separable), for `eval`'s report; not stored per step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub direction: Vec<f64>,
    /// The certificate of "not separable": (target place in the split, λ) with Σλ ĥ ≈ 0; for
    /// `eval`'s report, not stored per step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<(usize, f64)>,
}

/// [`HiddenStats`] of the hidden states `rows` (`plan.places.len()` × d, row-major, in the order of
/// `plan.places`), with the Rare group's mean row of W for the direction's cosine.
pub fn hidden_geometry(
    rows: &[f32],
    d: usize,
    plan: &HiddenPlan,
    rare_mean: Option<&[f64]>,
) -> Result<HiddenStats, MatrixError> {
    let all = Embeddings::new(plan.places.len(), d, rows)?;
    let sample: Vec<f32> = plan
        .sample
        .iter()
        .flat_map(|&i| all.row(i).iter().copied())
        .collect();
    let sample = Embeddings::new(plan.sample.len(), d, &sample)?;
    let unit = |row: &[f32]| -> Option<Vec<f64>> {
        let norm = row
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt();
        (norm > 0.0).then(|| row.iter().map(|&x| f64::from(x) / norm).collect())
    };
    let mean_cos_of = |units: &[Vec<f64>]| -> f64 {
        let m = units.len();
        if m < 2 {
            return f64::NAN;
        }
        let mut sum = vec![0.0f64; d];
        for u in units {
            sum.iter_mut().zip(u).for_each(|(s, x)| *s += x);
        }
        let norm2: f64 = sum.iter().map(|s| s * s).sum();
        (norm2 - m as f64) / (m as f64 * (m as f64 - 1.0))
    };
    let units: Vec<Vec<f64>> = (0..sample.n())
        .filter_map(|i| unit(sample.row(i)))
        .collect();
    let mean_cos = mean_cos_of(&units);
    let isoscore = covariance(sample).map_or(f64::NAN, |cov| isoscore_from_covariance(&cov, d));
    let mut self_sim = vec![f64::NAN; 3];
    let mut self_sim_types = [0usize; 3];
    for (g, types) in plan.self_sim.iter().enumerate() {
        let per_type: Vec<f64> = types
            .iter()
            .map(|own| {
                let u: Vec<Vec<f64>> = own.iter().filter_map(|&i| unit(all.row(i))).collect();
                mean_cos_of(&u)
            })
            .filter(|c| c.is_finite())
            .collect();
        self_sim_types[g] = per_type.len();
        if !per_type.is_empty() {
            self_sim[g] = per_type.iter().sum::<f64>() / per_type.len() as f64 - mean_cos;
        }
    }
    let sep = separability(sample);
    let check = sep.check(sample);
    let certificate = if sep.separable {
        check.min_projection
    } else {
        check.residual
    };
    let neg_u_rare_cos = match (&sep.direction, rare_mean) {
        (Some(u), Some(r)) if sep.separable => {
            let (dot, rn): (f64, f64) = u
                .iter()
                .zip(r)
                .fold((0.0, 0.0), |(dot, rn), (a, b)| (dot - a * b, rn + b * b));
            if rn > 0.0 { dot / rn.sqrt() } else { f64::NAN }
        }
        _ => f64::NAN,
    };
    Ok(HiddenStats {
        positions: sample.n(),
        mean_cos,
        isoscore,
        self_sim,
        self_sim_types,
        separable: sep.separable,
        margin: if sep.separable { sep.margin } else { 0.0 },
        certificate,
        proven: check.holds && (sep.separable || sep.converged),
        support: sep.weights.len(),
        neg_u_rare_cos,
        direction: if sep.separable {
            sep.direction.clone().unwrap_or_default()
        } else {
            Vec::new()
        },
        weights: if sep.separable {
            Vec::new()
        } else {
            sep.weights
                .iter()
                .filter_map(|&(t, l)| Some((plan.places[*plan.sample.get(t)?], l)))
                .collect()
        },
    })
}

/// The rows' covariance (row-major d × d, f64); `None` under two rows.
fn covariance(w: Embeddings<'_>) -> Option<Vec<f64>> {
    let (n, d) = (w.n(), w.d());
    if n < 2 {
        return None;
    }
    let x = faer::Mat::<f64>::from_fn(n, d, |i, k| f64::from(w.row(i)[k]));
    let gram = x.transpose() * &x;
    let mean: Vec<f64> = (0..d)
        .map(|k| (0..n).map(|i| x[(i, k)]).sum::<f64>() / n as f64)
        .collect();
    Some(
        (0..d * d)
            .map(|k| {
                let (i, j) = (k / d, k % d);
                gram[(i, j)] / n as f64 - mean[i] * mean[j]
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group_by_id(id: u32) -> Group {
        match id {
            0..10 => Group::Frequent,
            10..20 => Group::Medium,
            _ => Group::Rare,
        }
    }

    /// The plan is the same for the same split, its geometry sample has S distinct places inside
    /// the split's targets, and every self-similarity type reads the type it claims at ≥ 2 places.
    #[test]
    fn plan_is_fixed_and_reads_what_it_claims() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let tokens: Vec<u32> = (0..20_000).map(|_| rng.next_u32() % 25).collect();
        let a = HiddenPlan::new(&tokens, group_by_id);
        let b = HiddenPlan::new(&tokens, group_by_id);
        assert_eq!(a, b);
        assert_eq!(a.sample_len(), SAMPLE);
        assert!(a.places.windows(2).all(|w| w[0] < w[1]));
        assert!(a.places[0] >= 1 && *a.places.last().unwrap() < tokens.len());
        let mut sample: Vec<usize> = a.sample.iter().map(|&i| a.places[i]).collect();
        sample.dedup();
        assert_eq!(sample.len(), SAMPLE);
        for (g, types) in a.self_sim.iter().enumerate() {
            // 10 types per group here, each with hundreds of places: all taken, 8 places each.
            let want = if g == 2 { 5 } else { 10 };
            assert_eq!(types.len(), want, "group {g}");
            for own in types {
                assert_eq!(own.len(), SELF_SIM_PLACES);
                let input = tokens[a.places[own[0]] - 1];
                assert_eq!(group_by_id(input) as usize, g);
                assert!(own.iter().all(|&i| tokens[a.places[i] - 1] == input));
            }
        }
        // A short split: every target place, and a type seen once is never a self-similarity type.
        let short = [1u32, 2, 1, 3, 22];
        let p = HiddenPlan::new(&short, group_by_id);
        assert_eq!(p.places, vec![1, 2, 3, 4]);
        assert_eq!(p.self_sim[0], vec![vec![0, 2]]);
        assert!(p.self_sim[2].is_empty());
    }

    /// Constructed contexts: a type's states are a shared direction plus its own noise, so its
    /// self-similarity is known; checked against pairwise cosines computed in the test.
    #[test]
    fn self_similarity_of_constructed_contexts() {
        let d = 6;
        // Tokens: types 0 (frequent) and 25 (rare) alternate, with a filler 12 (medium).
        let tokens: Vec<u32> = (0..40).map(|i| [0u32, 12, 25][i % 3]).collect();
        let plan = HiddenPlan::new(&tokens, group_by_id);
        // h at place t depends on the input type: type 0 → e0 (+ a small per-place wobble),
        // type 12 → e1, type 25 → ±e2 alternating (cosine −1 between its places).
        let mut rows = Vec::new();
        for &t in &plan.places {
            let mut h = vec![0.0f32; d];
            match tokens[t - 1] {
                0 => {
                    h[0] = 1.0;
                    h[3] = 0.01 * (t % 5) as f32;
                }
                12 => h[1] = 1.0,
                _ => h[2] = if (t / 3) % 2 == 0 { 1.0 } else { -1.0 },
            }
            rows.extend(h);
        }
        let stats = hidden_geometry(&rows, d, &plan, None).unwrap();
        // Independent: the mean pairwise cosine of the sample by a double loop.
        let cos = |a: &[f32], b: &[f32]| {
            let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x * y)).sum();
            let n = |v: &[f32]| v.iter().map(|x| f64::from(x * x)).sum::<f64>().sqrt();
            dot / (n(a) * n(b))
        };
        let row = |i: usize| &rows[i * d..(i + 1) * d];
        let s = &plan.sample;
        let mut total = 0.0;
        for (x, &i) in s.iter().enumerate() {
            for &j in &s[x + 1..] {
                total += cos(row(i), row(j));
            }
        }
        let pairs = (s.len() * (s.len() - 1) / 2) as f64;
        let mean_cos = total / pairs;
        assert!((stats.mean_cos - mean_cos).abs() < 1e-9);
        let type_sim = |g: usize| {
            let own = &plan.self_sim[g][0];
            let mut sum = 0.0;
            for (x, &i) in own.iter().enumerate() {
                for &j in &own[x + 1..] {
                    sum += cos(row(i), row(j));
                }
            }
            sum / (own.len() * (own.len() - 1) / 2) as f64
        };
        assert!(type_sim(0) > 0.99);
        assert!((type_sim(1) - 1.0).abs() < 1e-12);
        for g in 0..3 {
            assert_eq!(stats.self_sim_types[g], 1);
            assert!((stats.self_sim[g] - (type_sim(g) - mean_cos)).abs() < 1e-9);
        }
        // ±e2 with the type's places: a mean cosine below the medium group's 1.
        assert!(stats.self_sim[2] < stats.self_sim[1]);
    }

    /// Hidden states all on one side (a shared offset) are separable with a checked certificate,
    /// and −u points away from the offset; centred noise is not separable.
    #[test]
    fn separability_of_sampled_states() {
        let d = 8;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut normal = || {
            let u = (f64::from(rng.next_u32()) + 0.5) / 4_294_967_296.0;
            let v = f64::from(rng.next_u32()) / 4_294_967_296.0;
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        };
        let tokens: Vec<u32> = (0..3_000).map(|i| (i % 30) as u32).collect();
        let plan = HiddenPlan::new(&tokens, group_by_id);
        let mut shifted = Vec::new();
        let mut centred = Vec::new();
        for _ in &plan.places {
            for k in 0..d {
                let x = 0.3 * normal();
                centred.push(x);
                shifted.push(if k == 0 { x + 3.0 } else { x });
            }
        }
        let rare_mean = {
            let mut r = vec![0.0; d];
            r[0] = -2.0;
            r[1] = 0.1;
            r
        };
        let yes = hidden_geometry(&shifted, d, &plan, Some(&rare_mean)).unwrap();
        assert!(yes.separable);
        assert!(yes.margin > 0.5);
        // The true margin lies between the checked certificate and the found point's norm.
        assert!(yes.certificate <= yes.margin * (1.0 + 1e-12));
        assert!(yes.margin - yes.certificate <= 1e-9 / yes.margin);
        // u ≈ e0, so −u ≈ −e0, the rare mean's direction.
        assert!(yes.neg_u_rare_cos > 0.95);
        assert_eq!(yes.direction.len(), d);
        let no = hidden_geometry(&centred, d, &plan, Some(&rare_mean)).unwrap();
        assert!(!no.separable);
        assert_eq!(no.margin, 0.0);
        assert!(no.certificate < 1e-6);
        assert!(no.neg_u_rare_cos.is_nan());
        assert!(no.direction.is_empty());
        // The certificate names places of the split, with convex weights.
        assert!(!no.weights.is_empty());
        let sum: f64 = no.weights.iter().map(|w| w.1).sum();
        assert!((sum - 1.0).abs() < 1e-9 && no.weights.iter().all(|w| w.1 >= 0.0));
        assert!(no.weights.iter().all(|w| plan.places.contains(&w.0)));
    }
}
