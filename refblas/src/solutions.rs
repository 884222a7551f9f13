//! Which kernels exist, which problems each can solve, and the heuristic that picks one when
//! the caller asks for none. How a kernel is numbered is the flavour's business
//! ([`crate::flavour`]).

/// The size of one GEMM (one batch item).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

/// A kernel: one "solution" of the library. See [`crate::kernels`] for what each does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// i-j-p loop. In the V5 flavour this is rocBLAS's "source kernel" (-2).
    Naive,
    /// Cache-blocked, packed panels.
    Blocked,
    /// k-outer rank-4 updates, no packing.
    Panel,
    /// 4x4 register tiles; only m and n multiples of 4.
    Reg4x4,
    /// The gemv path (V5 only, -9); only m == 1 or n == 1.
    Gemv,
}

impl Kernel {
    pub const ALL: [Kernel; 5] = [
        Kernel::Naive,
        Kernel::Blocked,
        Kernel::Panel,
        Kernel::Reg4x4,
        Kernel::Gemv,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Naive => "naive",
            Kernel::Blocked => "blocked",
            Kernel::Panel => "panel",
            Kernel::Reg4x4 => "reg4x4",
            Kernel::Gemv => "gemv",
        }
    }

    /// Whether this kernel can solve a problem of this shape (any supported type combination).
    pub fn can_solve(self, s: Shape) -> bool {
        match self {
            Kernel::Naive | Kernel::Blocked | Kernel::Panel => true,
            Kernel::Reg4x4 => s.m % 4 == 0 && s.n % 4 == 0,
            Kernel::Gemv => s.m == 1 || s.n == 1,
        }
    }
}

/// Below this many multiply-adds (m*n*k) the heuristic takes the naive kernel: packing costs
/// more than it saves.
pub const HEURISTIC_SMALL_WORK: i128 = 32 * 32 * 32;

/// The default choice when no solution is requested. A fixed rule, like rocBLAS's, and like
/// it deliberately not always the fastest: it never picks the panel kernel (best for small n
/// with A not transposed) nor the gemv path, and ignores the transposes entirely.
///
/// - m*n*k <= 32768: naive;
/// - else m and n multiples of 4: reg4x4;
/// - else: blocked.
pub fn heuristic(s: Shape) -> Kernel {
    let work = s.m as i128 * s.n as i128 * s.k as i128;
    if work <= HEURISTIC_SMALL_WORK {
        Kernel::Naive
    } else if Kernel::Reg4x4.can_solve(s) {
        Kernel::Reg4x4
    } else {
        Kernel::Blocked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(m: i64, n: i64, k: i64) -> Shape {
        Shape { m, n, k }
    }

    #[test]
    fn suitability() {
        assert!(Kernel::Reg4x4.can_solve(sh(8, 12, 3)));
        assert!(!Kernel::Reg4x4.can_solve(sh(8, 13, 3)));
        assert!(!Kernel::Reg4x4.can_solve(sh(5, 4, 3)));
        assert!(Kernel::Gemv.can_solve(sh(1, 100, 3)));
        assert!(Kernel::Gemv.can_solve(sh(100, 1, 3)));
        assert!(!Kernel::Gemv.can_solve(sh(2, 2, 3)));
        for k in [Kernel::Naive, Kernel::Blocked, Kernel::Panel] {
            assert!(k.can_solve(sh(7, 3, 0)));
        }
    }

    #[test]
    fn heuristic_rule() {
        assert_eq!(heuristic(sh(32, 32, 32)), Kernel::Naive);
        assert_eq!(heuristic(sh(1, 1, 1)), Kernel::Naive);
        assert_eq!(heuristic(sh(32, 32, 33)), Kernel::Reg4x4);
        assert_eq!(heuristic(sh(33, 32, 32)), Kernel::Blocked);
        assert_eq!(heuristic(sh(4096, 1, 4096)), Kernel::Blocked);
        assert_eq!(heuristic(sh(256, 512, 64)), Kernel::Reg4x4);
        // Huge sizes do not overflow.
        assert_eq!(
            heuristic(sh(i32::MAX as i64, i32::MAX as i64, i32::MAX as i64)),
            Kernel::Blocked
        );
    }
}
