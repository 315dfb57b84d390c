//! Floats that may be NaN or infinite, read back from JSON.
//!
//! JSON has no NaN: serde_json writes a non-finite float as `null`. The numbers conelab sends to
//! its viewers (a group with no positions has PPL NaN, a diverged loss is ±inf) must survive the
//! trip, so every float field of a wire type reads `null` as NaN through one of these
//! `deserialize_with` helpers. ±inf arrives as NaN: "not a number" is what a viewer shows for both.

use serde::{Deserialize, Deserializer};

fn nan(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// `null` → NaN.
pub fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(nan(Option::<f64>::deserialize(d)?))
}

/// A list of floats with `null` → NaN.
pub fn f64_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?
        .into_iter()
        .map(nan)
        .collect())
}

/// An optional list of floats with `null` items → NaN (a missing or `null` list is `None`).
pub fn opt_f64_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f64>>, D::Error> {
    Ok(Option::<Vec<Option<f64>>>::deserialize(d)?.map(|v| v.into_iter().map(nan).collect()))
}

/// Three floats with `null` → NaN.
pub fn f64_triple<'de, D: Deserializer<'de>>(d: D) -> Result<[f64; 3], D::Error> {
    Ok(<[Option<f64>; 3]>::deserialize(d)?.map(nan))
}

/// Two floats with `null` → NaN.
pub fn f64_pair<'de, D: Deserializer<'de>>(d: D) -> Result<[f64; 2], D::Error> {
    let [a, b] = <[Option<f64>; 2]>::deserialize(d)?;
    Ok([nan(a), nan(b)])
}

/// (x, y) points with `null` → NaN.
pub fn xy_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
    Ok(Vec::<(Option<f64>, Option<f64>)>::deserialize(d)?
        .into_iter()
        .map(|(x, y)| (nan(x), nan(y)))
        .collect())
}

/// 2-D f32 points with `null` → NaN.
pub fn f32_points<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<[f32; 2]>, D::Error> {
    Ok(Vec::<[Option<f32>; 2]>::deserialize(d)?
        .into_iter()
        .map(|[x, y]| [x.unwrap_or(f32::NAN), y.unwrap_or(f32::NAN)])
        .collect())
}

/// Three (value, count) pairs with `null` → NaN (per-group PPL and positions).
pub fn group_pairs<'de, D: Deserializer<'de>>(d: D) -> Result<[(f64, u64); 3], D::Error> {
    let v = <[(Option<f64>, u64); 3]>::deserialize(d)?;
    Ok(v.map(|(x, n)| (nan(x), n)))
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    struct T {
        #[serde(deserialize_with = "super::f64")]
        a: f64,
        #[serde(deserialize_with = "super::f64_vec")]
        v: Vec<f64>,
        #[serde(deserialize_with = "super::group_pairs")]
        g: [(f64, u64); 3],
    }

    #[test]
    fn non_finite_floats_come_back_as_nan_and_finite_ones_exactly() {
        let t = T {
            a: f64::NAN,
            v: vec![1.5, f64::INFINITY, -0.25],
            g: [(2.0, 3), (f64::NAN, 0), (0.1, 7)],
        };
        let json = serde_json::to_string(&t).expect("json");
        assert!(json.contains("null"), "{json}");
        let back: T = serde_json::from_str(&json).expect("back");
        assert!(back.a.is_nan());
        assert_eq!(back.v[0], 1.5);
        assert!(back.v[1].is_nan());
        assert_eq!(back.v[2], -0.25);
        assert_eq!(back.g[0], (2.0, 3));
        assert!(back.g[1].0.is_nan() && back.g[1].1 == 0);
        assert_eq!(back.g[2], (0.1, 7));
    }
}
