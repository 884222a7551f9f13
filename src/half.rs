//! The storage types rocBLAS uses for half precision (`rocblas_half`, `rocblas_bfloat16`) and
//! their conversions, written out here so that the rounding is exactly the IEEE
//! round-to-nearest-even that the hardware does, with no dependency to trust: refblas
//! computes with them, and the tuner writes its inputs and reads its outputs with them.

/// IEEE binary16, stored as its bit pattern (`rocblas_half`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct F16(pub u16);

/// bfloat16: the upper half of an f32 (`rocblas_bfloat16`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl F16 {
    /// Rounds an f32 to the nearest binary16, ties to even; overflow gives infinity and NaN
    /// stays NaN (quiet).
    pub fn from_f32(x: f32) -> F16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exp = ((bits >> 23) & 0xff) as i32;
        let man = bits & 0x007f_ffff;

        if exp == 0xff {
            // Infinity keeps a zero mantissa; any NaN becomes a quiet NaN with its top bits.
            let nan = if man != 0 {
                0x0200 | (man >> 13) as u16
            } else {
                0
            };
            return F16(sign | 0x7c00 | nan);
        }
        // Unbiased exponent re-biased for binary16 (bias 15 instead of 127).
        let e = exp - 127 + 15;
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e <= 0 {
            // Result is subnormal (or zero): value = m16 * 2^-24, so shift the 24-bit
            // significand right by 14 - e and round what falls off.
            if e < -10 {
                // Below half the smallest subnormal: rounds to a signed zero. (f32 subnormals
                // land here as well.)
                return F16(sign);
            }
            let sig = man | 0x0080_0000;
            let shift = (14 - e) as u32;
            let kept = sig >> shift;
            let rest = sig & ((1u32 << shift) - 1);
            let half = 1u32 << (shift - 1);
            let round_up = rest > half || (rest == half && (kept & 1) == 1);
            // A carry out of the subnormal range correctly produces the smallest normal.
            return F16(sign | (kept + round_up as u32) as u16);
        }
        let kept = ((e as u32) << 10) | (man >> 13);
        let rest = man & 0x1fff;
        let round_up = rest > 0x1000 || (rest == 0x1000 && (kept & 1) == 1);
        // A carry out of the mantissa bumps the exponent, up to infinity: that is IEEE too.
        F16(sign | (kept + round_up as u32) as u16)
    }

    /// Exact widening to f32 (every binary16 value is an f32 value).
    pub fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x03ff;
        let bits = match exp {
            0 => {
                // Zero or subnormal: man * 2^-24, exact in f32.
                let v = man as f32 * f32::from_bits(0x3380_0000); // 2^-24
                return if sign != 0 { -v } else { v };
            }
            0x1f => sign | 0x7f80_0000 | (man << 13),
            _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
        };
        f32::from_bits(bits)
    }
}

impl Bf16 {
    /// Rounds an f32 to bfloat16, ties to even; NaN stays a quiet NaN.
    pub fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16(((bits >> 16) as u16) | 0x0040);
        }
        // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a
        // carry into the exponent (up to infinity) is the correct result.
        let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
        Bf16((rounded >> 16) as u16)
    }

    /// Exact widening to f32.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

/// Rounds an f32 through binary16 and back: how refblas models arithmetic that rocBLAS does
/// in f16 (the `compute_type = f16_r` path of hgemm).
#[inline]
pub fn round_f16(x: f32) -> f32 {
    F16::from_f32(x).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_known_values() {
        assert_eq!(F16::from_f32(0.0).0, 0x0000);
        assert_eq!(F16::from_f32(-0.0).0, 0x8000);
        assert_eq!(F16::from_f32(1.0).0, 0x3c00);
        assert_eq!(F16::from_f32(-2.0).0, 0xc000);
        assert_eq!(F16::from_f32(0.5).0, 0x3800);
        assert_eq!(F16::from_f32(65504.0).0, 0x7bff); // largest finite
        assert_eq!(F16::from_f32(65519.0).0, 0x7bff); // below the tie: stays finite
        assert_eq!(F16::from_f32(65520.0).0, 0x7c00); // tie rounds to even = infinity
        assert_eq!(F16::from_f32(1e9).0, 0x7c00);
        assert_eq!(F16::from_f32(f32::NEG_INFINITY).0, 0xfc00);
        assert!(F16::from_f32(f32::NAN).to_f32().is_nan());
        // 1 + 2^-11 is exactly half an ulp above 1: ties to even (1.0).
        assert_eq!(F16::from_f32(1.0 + 2f32.powi(-11)).0, 0x3c00);
        // 1 + 3 * 2^-11 is a tie between 0x3c01 and 0x3c02: even is 0x3c02.
        assert_eq!(F16::from_f32(1.0 + 3.0 * 2f32.powi(-11)).0, 0x3c02);
        // Just above a tie rounds up.
        assert_eq!(
            F16::from_f32(1.0 + 2f32.powi(-11) + 2f32.powi(-20)).0,
            0x3c01
        );
        // Subnormals.
        assert_eq!(F16::from_f32(2f32.powi(-24)).0, 0x0001);
        assert_eq!(F16::from_f32(2f32.powi(-25)).0, 0x0000); // tie to even: zero
        assert_eq!(F16::from_f32(1.5 * 2f32.powi(-25)).0, 0x0001);
        assert_eq!(F16::from_f32(3.0 * 2f32.powi(-25)).0, 0x0002); // tie 1.5 ulp -> 2
        assert_eq!(F16::from_f32(2f32.powi(-14)).0, 0x0400); // smallest normal
        assert_eq!(F16::from_f32(2f32.powi(-14) - 2f32.powi(-25)).0, 0x0400); // carry up
        assert_eq!(F16::from_f32(1e-10).0, 0x0000);
    }

    #[test]
    fn f16_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let x = F16(h).to_f32();
            if x.is_nan() {
                assert!(F16::from_f32(x).to_f32().is_nan());
                continue;
            }
            assert_eq!(F16::from_f32(x).0, h, "bits {h:#06x} -> {x}");
        }
    }

    #[test]
    fn f16_rounding_matches_an_f64_model() {
        // For values between neighbours, the result must be the nearer neighbour.
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f32::from_bits((state >> 32) as u32);
            if !x.is_finite() || x.abs() > 65000.0 {
                continue;
            }
            let r = F16::from_f32(x).to_f32() as f64;
            let err = (r - x as f64).abs();
            // Either neighbour of r is not closer than r.
            let up = F16(F16::from_f32(x).0.wrapping_add(1)).to_f32() as f64;
            if up.is_finite() {
                assert!(err <= (up - x as f64).abs(), "{x}");
            }
        }
    }

    #[test]
    fn bf16_known_values() {
        assert_eq!(Bf16::from_f32(1.0).0, 0x3f80);
        assert_eq!(Bf16::from_f32(-1.0).0, 0xbf80);
        assert_eq!(Bf16::from_f32(1.0 + 2f32.powi(-8)).0, 0x3f80); // tie to even
        assert_eq!(Bf16::from_f32(1.0 + 3.0 * 2f32.powi(-8)).0, 0x3f82); // tie to even
        assert_eq!(
            Bf16::from_f32(1.0 + 2f32.powi(-8) + 2f32.powi(-20)).0,
            0x3f81
        );
        assert_eq!(Bf16::from_f32(f32::MAX).0, 0x7f80); // rounds to infinity
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        for h in 0..=u16::MAX {
            let x = Bf16(h).to_f32();
            if !x.is_nan() {
                assert_eq!(Bf16::from_f32(x).0, h);
            }
        }
    }
}
