//! The numbers on the host, for every library: the inputs every problem uploads (random in
//! [-1, 1], never zero: zeros hide wrong kernels and some kernels run faster on them), the
//! formats they are stored in, a high-precision reference computed in f64, and the judge
//! that holds each candidate's output to it; the order statistics of the timings.

use serde::Serialize;
use tunedblas_core::half::{Bf16, F16};

/// The element types a tuned GEMM reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Elem {
    F16,
    Bf16,
    F32,
    F64,
}

impl Elem {
    pub fn bytes(self) -> usize {
        match self {
            Elem::F16 | Elem::Bf16 => 2,
            Elem::F32 => 4,
            Elem::F64 => 8,
        }
    }

    /// The largest error a correct result of this output type may show: relative L2 over
    /// the result, and allclose's absolute and relative terms per element. Half types
    /// take the seed's tolerances; f32 and f64 tighter ones.
    pub fn tolerance(self) -> Tolerance {
        let (rel_l2, elem) = match self {
            Elem::F64 => (1e-12, 1e-10),
            Elem::F32 => (1e-5, 1e-4),
            Elem::F16 | Elem::Bf16 => (2e-3, 1e-2),
        };
        Tolerance {
            rel_l2,
            atol: elem,
            rtol: elem,
        }
    }
}

/// xorshift64*: reproducible inputs without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1), never zero.
    pub fn uniform(&mut self) -> f32 {
        let v = ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        if v == 0.0 {
            0.5
        } else {
            v
        }
    }
}

/// `x` in the bytes of type `t`.
pub fn encode(t: Elem, x: f64, out: &mut Vec<u8>) {
    match t {
        Elem::Bf16 => out.extend_from_slice(&Bf16::from_f32(x as f32).0.to_le_bytes()),
        Elem::F16 => out.extend_from_slice(&F16::from_f32(x as f32).0.to_le_bytes()),
        Elem::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
        Elem::F64 => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// `n` random values of type `t`, reproducible from `seed`.
pub fn random(t: Elem, n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n * t.bytes());
    for _ in 0..n {
        encode(t, rng.uniform() as f64, &mut out);
    }
    out
}

/// The values of a buffer of type `t`.
pub fn decode(t: Elem, bytes: &[u8]) -> Vec<f64> {
    let chunks = bytes.chunks_exact(t.bytes());
    chunks
        .map(|c| match t {
            Elem::Bf16 => Bf16(u16::from_le_bytes([c[0], c[1]])).to_f32() as f64,
            Elem::F16 => F16(u16::from_le_bytes([c[0], c[1]])).to_f32() as f64,
            Elem::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            Elem::F64 => f64::from_le_bytes(c.try_into().unwrap()),
        })
        .collect()
}

/// The [`Layout`] of a GEMM key, `$field: $value` giving what is not geometry (alpha, beta,
/// types, exact): rocBLAS's `ProblemKey` and the Lt libraries' `LtKey` name their geometry
/// alike.
macro_rules! layout_of {
    ($key:expr, $($field:ident: $value:expr),* $(,)?) => {{
        let k = &$key;
        let n = tunedblas_core::key::Trans::N;
        $crate::numerics::Layout {
            m: k.m,
            n: k.n,
            k: k.k,
            trans_a: k.trans_a != n,
            trans_b: k.trans_b != n,
            ld: [k.lda, k.ldb, k.ldc, k.ldd],
            stride: [k.stride_a, k.stride_b, k.stride_c, k.stride_d],
            batch: k.batch.max(1),
            $($field: $value),*
        }
    }};
}
pub(crate) use layout_of;

/// A GEMM as stored: D = alpha op(A) op(B) + beta C, column-major, each matrix with its
/// leading dimension and batch stride, the types of A, B, C and D.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub trans_a: bool,
    pub trans_b: bool,
    /// Leading dimensions and batch strides of A, B, C, D.
    pub ld: [i64; 4],
    pub stride: [i64; 4],
    pub batch: i64,
    pub alpha: f64,
    pub beta: f64,
    pub types: [Elem; 4],
    /// An f64 product is what the library computes (no reduced-precision accumulation, no
    /// epilogue): else the heuristic's own output is the reference.
    pub exact: bool,
}

impl Layout {
    /// A packed f32 `m x n x k` GEMM, no transposes, alpha 1 and beta 0: the tests' plain
    /// case, which each changes where it needs to.
    pub fn dense(m: i64, n: i64, k: i64) -> Layout {
        Layout {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            ld: [m, k, m, m],
            stride: [0; 4],
            batch: 1,
            alpha: 1.0,
            beta: 0.0,
            types: [Elem::F32; 4],
            exact: true,
        }
    }

    /// Elements matrix `which` (0 A, 1 B, 2 C, 3 D) spans, batch included.
    pub fn elems(&self, which: usize) -> usize {
        let cols = match which {
            0 if self.trans_a => self.m,
            0 => self.k,
            1 if self.trans_b => self.k,
            1 => self.n,
            _ => self.n,
        };
        let one = (self.ld[which] * cols.max(1)).max(1) as usize;
        one + self.stride[which].max(0) as usize * (self.batch.max(1) as usize - 1)
    }

    pub fn bytes(&self, which: usize) -> usize {
        self.elems(which) * self.types[which].bytes()
    }

    /// Multiply-adds of one call.
    pub fn macs(&self) -> f64 {
        self.m as f64 * self.n as f64 * self.k as f64 * self.batch.max(1) as f64
    }

    /// The bytes of matrix `which` of input set `set` (every problem uploads these, so
    /// one host reference serves every device).
    pub fn input(&self, which: usize, set: usize) -> Vec<u8> {
        random(
            self.types[which],
            self.elems(which),
            (set * 4 + which + 1) as u64,
        )
    }

    /// D in f64 from set 0's inputs, laid out as D is.
    pub fn reference(&self) -> Vec<f64> {
        let v = |w: usize| decode(self.types[w], &self.input(w, 0));
        reference(self, &v(0), &v(1), &v(2))
    }
}

/// `op(X)` of one batch packed so that each row's `k` elements are contiguous: `rows` x `k`.
fn pack(x: &[f64], offset: i64, ld: i64, transposed: bool, rows: i64, k: i64) -> Vec<f64> {
    let mut out = Vec::with_capacity((rows * k) as usize);
    for r in 0..rows {
        for l in 0..k {
            let idx = offset + if transposed { l + r * ld } else { r + l * ld };
            out.push(x[idx as usize]);
        }
    }
    out
}

/// D = alpha op(A) op(B) + beta C over `g`'s layout in f64, laid out as D (elements outside
/// each batch's m x n block are zero: they are never compared).
///
/// Large prefill shapes cost billions of multiply-adds on the host, so op(A) and op(B) are
/// packed with `k` contiguous and the columns are shared out over every core.
pub fn reference(g: &Layout, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
    let mut d = vec![0.0; g.elems(3)];
    let (m, n, k) = (g.m, g.n, g.k);
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    for batch in 0..g.batch.max(1) {
        let at = |w: usize| if g.batch > 1 { batch * g.stride[w] } else { 0 };
        // op(A) is m x k: A itself when transposed, else read across its columns.
        let pa = pack(a, at(0), g.ld[0], g.trans_a, m, k);
        // op(B)^T is n x k: B itself when not transposed.
        let pb = pack(b, at(1), g.ld[1], !g.trans_b, n, k);
        let next = std::sync::atomic::AtomicI64::new(0);
        let columns: Vec<(i64, Vec<f64>)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads.min(n.max(1) as usize))
                .map(|_| {
                    let (pa, pb, next) = (&pa, &pb, &next);
                    scope.spawn(move || {
                        let mut done = Vec::new();
                        loop {
                            let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if j >= n {
                                break done;
                            }
                            let bj = &pb[(j * k) as usize..((j + 1) * k) as usize];
                            let col = (0..m)
                                .map(|i| {
                                    let ai = &pa[(i * k) as usize..((i + 1) * k) as usize];
                                    ai.iter().zip(bj).map(|(x, y)| x * y).sum::<f64>()
                                })
                                .collect();
                            done.push((j, col));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().expect("reference worker"))
                .collect()
        });
        for (j, col) in columns {
            for (i, acc) in col.into_iter().enumerate() {
                let ci = (at(2) + i as i64 + j * g.ld[2]) as usize;
                let di = (at(3) + i as i64 + j * g.ld[3]) as usize;
                let cv = if g.beta != 0.0 { c[ci] } else { 0.0 };
                d[di] = g.alpha * acc + g.beta * cv;
            }
        }
    }
    d
}

/// The thresholds for one output type.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Tolerance {
    pub rel_l2: f64,
    pub atol: f64,
    pub rtol: f64,
}

/// How far a result is from the reference, over each batch's m x n block of D.
#[derive(Clone, Debug, Serialize)]
pub struct Distance {
    pub rel_l2: f64,
    /// Elements outside allclose, and the worst one's (index, got, want).
    pub not_close: usize,
    pub worst: Option<(usize, f64, f64)>,
}

pub fn distance(g: &Layout, got: &[f64], want: &[f64], tol: &Tolerance) -> Distance {
    let (mut err2, mut ref2, mut not_close, mut worst) = (0.0, 0.0, 0, None);
    let mut worst_excess = 0.0;
    if got.len() < want.len() {
        return Distance {
            rel_l2: f64::NAN,
            not_close: want.len(),
            worst: None,
        };
    }
    for batch in 0..g.batch.max(1) {
        let base = if g.batch > 1 { batch * g.stride[3] } else { 0 };
        for j in 0..g.n {
            for i in 0..g.m {
                let at = (base + i + j * g.ld[3]) as usize;
                let (x, w) = (got[at], want[at]);
                let diff = (x - w).abs();
                err2 += if diff.is_finite() {
                    diff * diff
                } else {
                    f64::INFINITY
                };
                ref2 += w * w;
                let limit = tol.atol + tol.rtol * w.abs();
                // NaN is not close either.
                if diff.is_nan() || diff > limit {
                    not_close += 1;
                    let excess = if diff.is_finite() {
                        diff - limit
                    } else {
                        f64::INFINITY
                    };
                    if worst.is_none() || excess > worst_excess {
                        worst_excess = excess;
                        worst = Some((at, x, w));
                    }
                }
            }
        }
    }
    let rel_l2 = if ref2 == 0.0 && err2 == 0.0 {
        0.0
    } else {
        (err2 / ref2.max(f64::MIN_POSITIVE)).sqrt()
    };
    Distance {
        rel_l2,
        not_close,
        worst,
    }
}

/// Multiply-adds up to which the host computes the f64 reference (a second or two over
/// the cores of a GPU host); larger problems are held to the library's own reference, or
/// to the heuristic's output.
pub const HOST_REFERENCE_MACS: f64 = (1u64 << 32) as f64;

/// What outputs are judged against: the reference, the heuristic's own error against it,
/// and the tolerance a candidate must keep: the type's, or twice the heuristic's own error
/// where that is larger (a reference computed another way than the library's kernels).
pub struct Judge {
    layout: Layout,
    reference: Vec<f64>,
    pub base_err: f64,
    tol: Tolerance,
}

impl Judge {
    /// `reference`, or where there is none the heuristic's output `base` itself (an element
    /// it left unwritten, still the NaN the buffer was poisoned with, says it is wrong).
    /// A heuristic whose own output is off fails the shape.
    pub fn new(
        layout: Layout,
        reference: Option<Vec<f64>>,
        base: Vec<f64>,
    ) -> Result<Judge, String> {
        let t = layout.types[3].tolerance();
        let (reference, base_err) = match reference {
            // An element the heuristic left unwritten is NaN, whatever the reference.
            _ if base.iter().any(|x| x.is_nan()) => (base, f64::NAN),
            Some(r) => {
                let d = distance(
                    &layout,
                    &base,
                    &r,
                    &Tolerance {
                        atol: f64::INFINITY,
                        ..t
                    },
                );
                (r, d.rel_l2)
            }
            None => (base, 0.0),
        };
        let scale = (2.0 * base_err / t.rel_l2).max(1.0);
        if base_err.is_nan() || scale > 10.0 {
            return Err(format!(
                "the heuristic's own result is off by {base_err:.2e} (tolerance {:.0e}): inputs or reference are wrong",
                t.rel_l2
            ));
        }
        Ok(Judge {
            layout,
            reference,
            base_err,
            tol: Tolerance {
                rel_l2: t.rel_l2 * scale,
                atol: t.atol * scale,
                rtol: t.rtol * scale,
            },
        })
    }

    /// `out`'s relative error, or why it is not kept.
    pub fn check(&self, out: &[f64]) -> Result<f64, String> {
        let d = distance(&self.layout, out, &self.reference, &self.tol);
        if d.rel_l2 <= self.tol.rel_l2 && d.not_close == 0 {
            return Ok(d.rel_l2);
        }
        let mut s = format!(
            "relative L2 {:.2e} (limit {:.1e})",
            d.rel_l2, self.tol.rel_l2
        );
        if let Some((i, got, want)) = d.worst {
            s.push_str(&format!(
                ", {} elements outside allclose(atol={:.0e}, rtol={:.0e}), worst D[{i}] = {got} vs {want}",
                d.not_close, self.tol.atol, self.tol.rtol
            ));
        }
        Err(s)
    }
}

/// Reads an f64 that may not be finite (no spread, a median of nothing): JSON has no NaN
/// or infinity, so serde_json writes them as null, which reads back here as NaN (every
/// reader takes a non-finite figure as "none"). Without it a checkpoint line holding one
/// would not read back, and its shape would be tuned again on resume.
pub fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as serde::Deserialize>::deserialize(d)?.unwrap_or(f64::NAN))
}

pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// (max - min) / median: the relative spread of a set of samples.
pub fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (hi - lo) / median(v)
}
