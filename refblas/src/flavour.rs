//! The two rocBLAS generations refblas can pose as. They differ in identity (SONAME, version
//! string) and, what matters to tuning, in how solution indices are numbered and read.
//!
//! - V4 (rocBLAS 4.x, ROCm 5.5-6.4): positive 1-based indices into one library-wide list, so
//!   each type combination has its own range; an index <= 0 asks for the heuristic.
//! - V5 (rocBLAS 5.x, ROCm 7.x): 0 and -1 ask for the heuristic; positive values would be
//!   hipBLASLt solutions (there are none here); -2 is the source kernel, -9 the gemv path;
//!   Tensile solutions are `-(idx + 1) - 10` with large library indices.

use crate::combo::Combo;
use crate::solutions::{heuristic, Kernel, Shape};
use std::ffi::CStr;
use tunedblas_core::abi::{GemmAlgo, Status, ALGO_SOLUTION_INDEX, STATUS_INVALID_VALUE};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    V4,
    V5,
}

/// V4 catalogue, in list order: index = 1 + 4 * combo ordinal + position. The panel kernel,
/// which the heuristic never picks, comes last in every list.
const V4_KERNELS: [Kernel; 4] = [
    Kernel::Naive,
    Kernel::Blocked,
    Kernel::Reg4x4,
    Kernel::Panel,
];
/// V5 catalogue, in list order: the source kernel and the gemv path, then the Tensile-style
/// solutions (again the panel kernel last).
const V5_KERNELS: [Kernel; 5] = [
    Kernel::Naive,
    Kernel::Gemv,
    Kernel::Blocked,
    Kernel::Reg4x4,
    Kernel::Panel,
];
/// V5 Tensile-style kernels, numbered by their position here.
const V5_TENSILE: [Kernel; 3] = [Kernel::Blocked, Kernel::Panel, Kernel::Reg4x4];

/// rocBLAS 5.x's source-kernel solution index.
pub const V5_SOURCE_KERNEL: i32 = -2;
/// rocBLAS 5.x's gemv-path solution index.
pub const V5_GEMV: i32 = -9;
/// First internal library index of the V5 Tensile-style solutions: large like a real build's,
/// so the first one encodes to -1086326047.
pub const V5_TENSILE_BASE: i64 = 1_086_326_036;

/// Which solution one call runs, and whether the heuristic chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub kernel: Kernel,
    pub heuristic: bool,
}

impl Flavour {
    pub fn soname(self) -> &'static str {
        match self {
            Flavour::V4 => "librocblas.so.4",
            Flavour::V5 => "librocblas.so.5",
        }
    }

    /// `MAJOR.MINOR.PATCH.<git hash>` as rocBLAS prints it.
    pub fn version(self) -> &'static CStr {
        match self {
            Flavour::V4 => c"4.4.0.5f2e9c71",
            Flavour::V5 => c"5.6.0.c83a10d4",
        }
    }

    /// Every kernel this flavour offers, in the order get_solutions lists them.
    pub fn kernels(self) -> &'static [Kernel] {
        match self {
            Flavour::V4 => &V4_KERNELS,
            Flavour::V5 => &V5_KERNELS,
        }
    }

    /// The solution index of `kernel` for `combo`, or None if this flavour lacks that kernel.
    pub fn solution_id(self, combo: Combo, kernel: Kernel) -> Option<i32> {
        let ord = combo.ordinal() as i64;
        match self {
            Flavour::V4 => {
                let pos = V4_KERNELS.iter().position(|&k| k == kernel)? as i64;
                Some((1 + 4 * ord + pos) as i32)
            }
            Flavour::V5 => match kernel {
                Kernel::Naive => Some(V5_SOURCE_KERNEL),
                Kernel::Gemv => Some(V5_GEMV),
                _ => {
                    let t = V5_TENSILE.iter().position(|&k| k == kernel)? as i64;
                    let idx = V5_TENSILE_BASE + 10_000 * ord + 37 * t;
                    Some((-(idx + 1) - 10) as i32)
                }
            },
        }
    }

    /// Whether `index` (with algo = solution_index) means "use the heuristic".
    pub fn is_heuristic_index(self, index: i32) -> bool {
        match self {
            Flavour::V4 => index <= 0,
            Flavour::V5 => index == 0 || index == -1,
        }
    }

    /// The kernel an index names for this type combination, if any: an index of another
    /// combination, or of no solution at all, names nothing.
    pub fn kernel_for(self, combo: Combo, index: i32) -> Option<Kernel> {
        self.kernels()
            .iter()
            .copied()
            .find(|&k| self.solution_id(combo, k) == Some(index))
    }

    /// The solution IDs offered for `combo`, in list order; with a shape, only those that can
    /// solve it (the shape-specific get_solutions), without, all (get_solutions_by_type).
    pub fn solution_ids(self, combo: Combo, shape: Option<Shape>) -> Vec<i32> {
        self.kernels()
            .iter()
            .filter(|k| match shape {
                Some(s) => k.can_solve(s),
                None => true,
            })
            .filter_map(|&k| self.solution_id(combo, k))
            .collect()
    }

    /// What a GEMM call asks for: the heuristic's pick, or the requested solution if it exists
    /// for this combination and can solve this shape. Anything else is `invalid_value`, never a
    /// silent fallback. With `algo = standard` the index is ignored.
    pub fn resolve(
        self,
        combo: Combo,
        algo: GemmAlgo,
        index: i32,
        shape: Shape,
    ) -> Result<Choice, Status> {
        if algo != ALGO_SOLUTION_INDEX || self.is_heuristic_index(index) {
            return Ok(Choice {
                kernel: heuristic(shape),
                heuristic: true,
            });
        }
        match self.kernel_for(combo, index) {
            Some(kernel) if kernel.can_solve(shape) => Ok(Choice {
                kernel,
                heuristic: false,
            }),
            _ => Err(STATUS_INVALID_VALUE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use tunedblas_core::abi::ALGO_STANDARD;

    const SQ: Shape = Shape {
        m: 64,
        n: 64,
        k: 64,
    };

    #[test]
    fn v4_ids_are_positive_and_distinct_across_combos() {
        let mut seen = HashSet::new();
        for c in Combo::ALL {
            let ids = Flavour::V4.solution_ids(c, None);
            assert_eq!(ids.len(), 4);
            for id in ids {
                assert!(id > 0);
                assert!(seen.insert(id), "duplicate {id}");
                let k = Flavour::V4.kernel_for(c, id).unwrap();
                assert_eq!(Flavour::V4.solution_id(c, k), Some(id));
            }
        }
        assert_eq!(
            Flavour::V4.solution_ids(Combo::HalfF32, None),
            vec![1, 2, 3, 4]
        );
        assert_eq!(
            Flavour::V4.solution_ids(Combo::F64, None),
            vec![17, 18, 19, 20]
        );
        assert_eq!(Flavour::V4.solution_id(Combo::F32, Kernel::Gemv), None);
    }

    #[test]
    fn v5_ids_look_like_a_real_build() {
        assert_eq!(
            Flavour::V5.solution_id(Combo::HalfF32, Kernel::Blocked),
            Some(-1086326047)
        );
        let mut tensile = HashSet::new();
        for c in Combo::ALL {
            let ids = Flavour::V5.solution_ids(c, None);
            assert_eq!(ids.len(), 5);
            assert!(ids.contains(&V5_SOURCE_KERNEL) && ids.contains(&V5_GEMV));
            for id in ids.into_iter().filter(|&i| i <= -11) {
                assert!(id < -1_000_000_000);
                assert!(tensile.insert(id));
                let k = Flavour::V5.kernel_for(c, id).unwrap();
                assert_eq!(Flavour::V5.solution_id(c, k), Some(id));
            }
        }
        assert_eq!(tensile.len(), 15);
    }

    #[test]
    fn v4_index_semantics() {
        let f = Flavour::V4;
        let c = Combo::F32;
        let heur = Choice {
            kernel: heuristic(SQ),
            heuristic: true,
        };
        assert_eq!(f.resolve(c, ALGO_SOLUTION_INDEX, 0, SQ), Ok(heur));
        assert_eq!(f.resolve(c, ALGO_SOLUTION_INDEX, -2, SQ), Ok(heur));
        assert_eq!(f.resolve(c, ALGO_STANDARD, 999, SQ), Ok(heur));
        let panel = f.solution_id(c, Kernel::Panel).unwrap();
        assert_eq!(
            f.resolve(c, ALGO_SOLUTION_INDEX, panel, SQ),
            Ok(Choice {
                kernel: Kernel::Panel,
                heuristic: false
            })
        );
        // Another combination's index, a missing one, an unsuitable one.
        let other = f.solution_id(Combo::F64, Kernel::Panel).unwrap();
        assert_eq!(
            f.resolve(c, ALGO_SOLUTION_INDEX, other, SQ),
            Err(STATUS_INVALID_VALUE)
        );
        assert_eq!(
            f.resolve(c, ALGO_SOLUTION_INDEX, 999, SQ),
            Err(STATUS_INVALID_VALUE)
        );
        let reg = f.solution_id(c, Kernel::Reg4x4).unwrap();
        let odd = Shape { m: 5, n: 8, k: 3 };
        assert_eq!(
            f.resolve(c, ALGO_SOLUTION_INDEX, reg, odd),
            Err(STATUS_INVALID_VALUE)
        );
        assert!(f.resolve(c, ALGO_SOLUTION_INDEX, reg, SQ).is_ok());
    }

    #[test]
    fn v5_index_semantics() {
        let f = Flavour::V5;
        let c = Combo::HalfF16;
        for h in [0, -1] {
            assert!(f.resolve(c, ALGO_SOLUTION_INDEX, h, SQ).unwrap().heuristic);
        }
        // Positive = hipBLASLt: none here. Unassigned negatives: invalid.
        for bad in [1, 5, -3, -8, -10, -11, i32::MIN] {
            assert_eq!(
                f.resolve(c, ALGO_SOLUTION_INDEX, bad, SQ),
                Err(STATUS_INVALID_VALUE),
                "{bad}"
            );
        }
        assert_eq!(
            f.resolve(c, ALGO_SOLUTION_INDEX, -2, SQ),
            Ok(Choice {
                kernel: Kernel::Naive,
                heuristic: false
            })
        );
        assert_eq!(
            f.resolve(c, ALGO_SOLUTION_INDEX, -9, SQ),
            Err(STATUS_INVALID_VALUE)
        );
        let gemv_shape = Shape { m: 64, n: 1, k: 64 };
        assert_eq!(
            f.resolve(c, ALGO_SOLUTION_INDEX, -9, gemv_shape),
            Ok(Choice {
                kernel: Kernel::Gemv,
                heuristic: false
            })
        );
        let t = f.solution_id(c, Kernel::Blocked).unwrap();
        assert!(f.resolve(c, ALGO_SOLUTION_INDEX, t, SQ).is_ok());
        assert_eq!(
            f.resolve(Combo::HalfF32, ALGO_SOLUTION_INDEX, t, SQ),
            Err(STATUS_INVALID_VALUE)
        );
        // The shape-specific list offers -9 only for gemv shapes, reg4x4 only for multiples of 4.
        assert!(!f.solution_ids(c, Some(SQ)).contains(&V5_GEMV));
        assert!(f.solution_ids(c, Some(gemv_shape)).contains(&V5_GEMV));
        let reg = f.solution_id(c, Kernel::Reg4x4).unwrap();
        assert!(!f.solution_ids(c, Some(gemv_shape)).contains(&reg));
    }
}
