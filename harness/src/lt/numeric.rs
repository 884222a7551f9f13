//! Host-side numbers: random inputs in the device's formats, conversions back, errors and
//! order statistics.

use tunedblas_core::cublaslt::{CudaDataType, R_16BF, R_16F, R_32F, R_64F};

/// xorshift64*: reproducible inputs without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// f32 -> bf16 bits, rounding to nearest even (NaN stays NaN).
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((b >> 16) & 1);
    ((b.wrapping_add(round)) >> 16) as u16
}

pub fn bf16_value(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 -> IEEE half bits, rounding to nearest even, with subnormals and infinities.
pub fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1 << shift) - 1);
        let mut v = m >> shift;
        if rem > half || (rem == half && v & 1 == 1) {
            v += 1;
        }
        return sign | v as u16;
    }
    let mut v = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && v & 1 == 1) {
        v += 1; // may carry into the exponent, which is the right rounding
    }
    sign | v as u16
}

pub fn f16_value(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let man = (h & 0x3ff) as f32;
    match exp {
        0 => sign * man * 2f32.powi(-24),
        31 if man == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        _ => sign * (1.0 + man / 1024.0) * 2f32.powi(exp - 15),
    }
}

/// `n` random values in [-1, 1) in the bytes of type `t`.
pub fn random(t: CudaDataType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * 8);
    for _ in 0..n {
        let x = rng.uniform();
        match t {
            R_16BF => out.extend_from_slice(&bf16_bits(x).to_le_bytes()),
            R_16F => out.extend_from_slice(&f16_bits(x).to_le_bytes()),
            R_64F => out.extend_from_slice(&(x as f64).to_le_bytes()),
            _ => out.extend_from_slice(&x.to_le_bytes()),
        }
    }
    out
}

/// The values of a buffer of type `t`.
pub fn to_f64(t: CudaDataType, bytes: &[u8]) -> Vec<f64> {
    match t {
        R_16BF => bytes
            .chunks_exact(2)
            .map(|c| bf16_value(u16::from_le_bytes([c[0], c[1]])) as f64)
            .collect(),
        R_16F => bytes
            .chunks_exact(2)
            .map(|c| f16_value(u16::from_le_bytes([c[0], c[1]])) as f64)
            .collect(),
        R_64F => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        R_32F => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        _ => Vec::new(),
    }
}

/// ||out - ref|| / ||ref|| over the first `ref.len()` elements; NaN anywhere gives NaN.
pub fn rel_l2(out: &[f64], reference: &[f64]) -> f64 {
    if out.len() < reference.len() {
        return f64::NAN;
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (o, r) in out.iter().zip(reference) {
        num += (o - r) * (o - r);
        den += r * r;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}

/// The largest relative error a correct result of output type `t` may show.
pub fn tolerance(t: CudaDataType) -> f64 {
    match t {
        R_16BF => 1e-2,
        R_16F => 2e-3,
        _ => 1e-4,
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// (max - min) / median: the relative spread of a set of trials.
pub fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (hi - lo) / median(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_and_f16_round_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_value(bf16_bits(-2.5)), -2.5);
        // 1 + 2^-8 is exactly half way between two bf16 values: ties go to even (1.0).
        assert_eq!(bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert!(bf16_value(bf16_bits(f32::NAN)).is_nan());
        for x in [1.0f32, -0.333, 65504.0, 6.1e-5, 3.0e-7, 0.0] {
            let back = f16_value(f16_bits(x));
            assert!((back - x).abs() <= x.abs() * 1e-3 + 6e-8, "{x} -> {back}");
        }
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(1e6), 0x7c00);
        assert!(f16_value(f16_bits(f32::NAN)).is_nan());
    }

    #[test]
    fn random_inputs_are_in_range_and_reproducible() {
        let a = random(R_16BF, 1000, &mut Rng::new(7));
        let b = random(R_16BF, 1000, &mut Rng::new(7));
        assert_eq!(a, b);
        let v = to_f64(R_16BF, &a);
        assert_eq!(v.len(), 1000);
        assert!(
            v.iter().all(|x| (-1.0..=1.0).contains(x)),
            "bf16 rounding may reach 1.0"
        );
        assert!(v.iter().any(|x| *x > 0.5) && v.iter().any(|x| *x < -0.5));
    }

    #[test]
    fn errors_and_statistics() {
        assert_eq!(rel_l2(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_l2(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-12);
        assert!(rel_l2(&[f64::NAN, 0.0], &[1.0, 0.0]).is_nan());
        assert!(rel_l2(&[1.0], &[1.0, 2.0]).is_nan(), "a short output fails");
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!((spread(&[1.0, 1.1, 0.9]) - 0.2).abs() < 1e-12);
    }
}
