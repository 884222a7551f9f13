//! Order statistics of timing samples.

/// The `q` quantile (0..=1) of `v`, nearest rank; sorts `v`.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

pub fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=101).rev().map(f64::from).collect();
        assert_eq!(median(&mut v), 51.0);
        assert_eq!(quantile(&mut v, 0.99), 100.0);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert!(median(&mut []).is_nan());
    }
}
