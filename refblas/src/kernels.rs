//! The GEMM kernels behind the solutions: `acc = op(A) * op(B)` in the accumulator type.
//!
//! Each kernel walks memory differently (so which one is fastest depends on the shape and the
//! transposes, as with real GPU solutions) and sums the k products of an output element in
//! its own order (so, as with real solvers, results are close but not bit-identical). With
//! f16 compute, [`Policy::settle`] rounds the accumulator at each kernel's block boundaries.
//! Every kernel overwrites all of `acc` (m x n, column-major, leading dimension m).
//!
//! With f16/bf16 output, f32 summation-order differences rarely survive the final rounding, so
//! most solutions give the same bits (as on a GPU); the split-K panel kernel does not.

use crate::combo::{Acc, Policy};
use crate::solutions::Kernel;

#[cfg(test)]
thread_local! {
    /// Operand elements widened by kernels on this thread (test builds only): the work model
    /// behind the speed test, since each widening of an f16/bf16 element costs real time.
    pub(crate) static LOADS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Widens one operand element to the accumulator type.
#[inline(always)]
fn ld<P: Policy>(e: P::E) -> P::A {
    #[cfg(test)]
    LOADS.with(|c| c.set(c.get() + 1));
    P::load(e)
}

/// op(A) (m x k) and op(B) (k x n) of one GEMM, read through their leading dimensions.
pub struct Operands<'a, E> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// A as stored: column-major, `lda` apart; transposed when `trans_a`.
    pub a: &'a [E],
    pub lda: usize,
    pub trans_a: bool,
    pub b: &'a [E],
    pub ldb: usize,
    pub trans_b: bool,
}

impl<E: Copy> Operands<'_, E> {
    /// op(A)(i, p).
    #[inline(always)]
    fn a(&self, i: usize, p: usize) -> E {
        self.a[op_index(self.lda, self.trans_a, i, p)]
    }

    /// op(B)(p, j).
    #[inline(always)]
    fn b(&self, p: usize, j: usize) -> E {
        self.b[op_index(self.ldb, self.trans_b, p, j)]
    }
}

/// Where element (row, col) of op(X) is, X stored column-major `ld` apart.
#[inline(always)]
pub(crate) fn op_index(ld: usize, trans: bool, row: usize, col: usize) -> usize {
    if trans {
        col + row * ld
    } else {
        row + col * ld
    }
}

/// The packed panels of op(A) (m rows) and op(B) (n columns), `kc` deep.
fn panel_buffers<P: Policy>(m: usize, n: usize, kc: usize) -> (Vec<P::A>, Vec<P::A>) {
    (vec![P::A::ZERO; m * kc], vec![P::A::ZERO; n * kc])
}

/// The k-blocks `(start, depth)` of `width` (the last one shorter).
fn k_blocks(k: usize, width: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..k).step_by(width).map(move |pc| (pc, width.min(k - pc)))
}

/// Runs `kernel`: `acc = alpha * op(A) * op(B)`, alpha applied in the kernel's epilogue as on
/// a GPU. The caller has checked that the kernel can solve this shape.
pub fn run<P: Policy>(kernel: Kernel, o: &Operands<P::E>, alpha: P::A, acc: &mut [P::A]) {
    assert_eq!(acc.len(), o.m * o.n);
    match kernel {
        Kernel::Naive => naive::<P>(o, acc),
        Kernel::Blocked => blocked::<P>(o, acc),
        Kernel::Panel => return panel::<P>(o, alpha, acc),
        Kernel::Reg4x4 => reg4x4::<P>(o, acc),
        Kernel::Gemv => gemv::<P>(o, acc),
    }
    acc.iter_mut().for_each(|t| *t = P::settle(alpha * *t));
}

/// With f16 compute, the naive kernel rounds its running sum every this many products.
const NAIVE_SETTLE: usize = 8;

/// i-j-p triple loop, one running sum per element, no packing: each product converts its two
/// inputs on the fly. Cheap to start (best on tiny problems and on `T,N` layouts where both
/// operands are read along contiguous memory), slow on large ones.
fn naive<P: Policy>(o: &Operands<P::E>, acc: &mut [P::A]) {
    for j in 0..o.n {
        for i in 0..o.m {
            let mut s = P::A::ZERO;
            for p in 0..o.k {
                s = s + ld::<P>(o.a(i, p)) * ld::<P>(o.b(p, j));
                if p % NAIVE_SETTLE == NAIVE_SETTLE - 1 {
                    s = P::settle(s);
                }
            }
            acc[i + j * o.m] = P::settle(s);
        }
    }
}

/// Packs rows `0..m` of op(A), columns `p0..p0+kc`, as `dst[i * kc + pp]` (each row's k-slice
/// contiguous), converting to the accumulator type once.
fn pack_a_rows<P: Policy>(o: &Operands<P::E>, p0: usize, kc: usize, dst: &mut [P::A]) {
    if o.trans_a {
        for i in 0..o.m {
            for pp in 0..kc {
                dst[i * kc + pp] = ld::<P>(o.a(i, p0 + pp));
            }
        }
    } else {
        // Read A down its columns (contiguous), write strided.
        for pp in 0..kc {
            for i in 0..o.m {
                dst[i * kc + pp] = ld::<P>(o.a(i, p0 + pp));
            }
        }
    }
}

/// Packs columns `0..n` of op(B), rows `p0..p0+kc`, as `dst[j * kc + pp]`.
fn pack_b_cols<P: Policy>(o: &Operands<P::E>, p0: usize, kc: usize, dst: &mut [P::A]) {
    if o.trans_b {
        for pp in 0..kc {
            for j in 0..o.n {
                dst[j * kc + pp] = ld::<P>(o.b(p0 + pp, j));
            }
        }
    } else {
        for j in 0..o.n {
            for pp in 0..kc {
                dst[j * kc + pp] = ld::<P>(o.b(p0 + pp, j));
            }
        }
    }
}

/// Blocking of the cache-blocked kernel: k-panels of `BLOCKED_KC`, output tiles of
/// `BLOCKED_MC x BLOCKED_NC`.
const BLOCKED_KC: usize = 64;
const BLOCKED_MC: usize = 64;
const BLOCKED_NC: usize = 64;

/// Two-lane dot product: even and odd products summed apart, then added.
#[inline(always)]
fn dot2<A: Acc>(x: &[A], y: &[A]) -> A {
    let (mut s0, mut s1) = (A::ZERO, A::ZERO);
    let mut xs = x.chunks_exact(2);
    let mut ys = y.chunks_exact(2);
    for (xp, yp) in (&mut xs).zip(&mut ys) {
        s0 = s0 + xp[0] * yp[0];
        s1 = s1 + xp[1] * yp[1];
    }
    if let (Some(&xl), Some(&yl)) = (xs.remainder().first(), ys.remainder().first()) {
        s0 = s0 + xl * yl;
    }
    s0 + s1
}

/// [`dot2`] of one row against four columns at once (same per-element order, 8 independent
/// sums for the CPU to overlap).
#[inline(always)]
fn dot2x4<A: Acc>(x: &[A], y: [&[A]; 4]) -> [A; 4] {
    let kc = x.len();
    let mut e = [A::ZERO; 4];
    let mut o = [A::ZERO; 4];
    let pairs = kc / 2;
    for q in 0..pairs {
        let (x0, x1) = (x[2 * q], x[2 * q + 1]);
        for c in 0..4 {
            e[c] = e[c] + x0 * y[c][2 * q];
            o[c] = o[c] + x1 * y[c][2 * q + 1];
        }
    }
    if kc % 2 == 1 {
        let xl = x[kc - 1];
        for c in 0..4 {
            e[c] = e[c] + xl * y[c][kc - 1];
        }
    }
    [e[0] + o[0], e[1] + o[1], e[2] + o[2], e[3] + o[3]]
}

/// Cache-blocked kernel: packs a k-panel of op(A) and op(B) (converted once), then computes
/// output tiles from the packed panels with two-lane dot products. Per element: the sum of each
/// 64-wide k-block is formed apart and added to the running total. Good for large problems.
fn blocked<P: Policy>(o: &Operands<P::E>, acc: &mut [P::A]) {
    let (m, n, k) = (o.m, o.n, o.k);
    let (mut ap, mut bp) = panel_buffers::<P>(m, n, BLOCKED_KC.min(k));
    acc.fill(P::A::ZERO);
    for (pc, kc) in k_blocks(k, BLOCKED_KC) {
        pack_a_rows::<P>(o, pc, kc, &mut ap);
        pack_b_cols::<P>(o, pc, kc, &mut bp);
        for jc in (0..n).step_by(BLOCKED_NC) {
            let j_end = (jc + BLOCKED_NC).min(n);
            for ic in (0..m).step_by(BLOCKED_MC) {
                let i_end = (ic + BLOCKED_MC).min(m);
                let mut j = jc;
                while j + 4 <= j_end {
                    let cols = [
                        &bp[j * kc..(j + 1) * kc],
                        &bp[(j + 1) * kc..(j + 2) * kc],
                        &bp[(j + 2) * kc..(j + 3) * kc],
                        &bp[(j + 3) * kc..(j + 4) * kc],
                    ];
                    for i in ic..i_end {
                        let part = dot2x4(&ap[i * kc..(i + 1) * kc], cols);
                        for (c, &v) in part.iter().enumerate() {
                            let t = &mut acc[i + (j + c) * m];
                            *t = P::settle(*t + v);
                        }
                    }
                    j += 4;
                }
                while j < j_end {
                    let col = &bp[j * kc..(j + 1) * kc];
                    for i in ic..i_end {
                        let t = &mut acc[i + j * m];
                        *t = P::settle(*t + dot2(&ap[i * kc..(i + 1) * kc], col));
                    }
                    j += 1;
                }
            }
        }
    }
}

/// With f16 compute, the panel kernel rounds its column of sums every this many rank-4 steps.
const PANEL_SETTLE_STEPS: usize = 4;
/// From this k on, the panel kernel splits k in two (split-K).
const PANEL_SPLIT_MIN_K: usize = 8;

/// k-outer ("axpy") kernel with 2-way split-K: walks k in rank-4 steps; at each step it
/// widens four columns of op(A) once and adds `((a0 b0 + a1 b1) + (a2 b2 + a3 b3))` into every
/// output column, with no packing. Each half of k is summed apart, and each half's
/// `alpha * sum` is rounded to the output type before the two are added, as a GPU split-K
/// kernel does when its partial results go through D (Tensile's GlobalSplitU): so with f16 or
/// bf16 output this solution's bits differ visibly from the others'. All of D's accumulators
/// are swept at every step: good for small n (gemv-like) with A not transposed, poor for
/// large n or `T` layouts (A read across its columns).
fn panel<P: Policy>(o: &Operands<P::E>, alpha: P::A, acc: &mut [P::A]) {
    let k = o.k;
    // Split on a multiple of 4 so both halves run whole rank-4 steps.
    let split = if k >= PANEL_SPLIT_MIN_K {
        (k / 2) & !3
    } else {
        k
    };
    panel_range::<P>(o, 0, split, acc);
    if split == k {
        acc.iter_mut().for_each(|t| *t = P::settle(alpha * *t));
        return;
    }
    let mut hi = vec![P::A::ZERO; acc.len()];
    panel_range::<P>(o, split, k, &mut hi);
    for (t, &h) in acc.iter_mut().zip(&hi) {
        let lo = P::round_out(P::settle(alpha * *t));
        let h = P::round_out(P::settle(alpha * h));
        *t = P::settle(lo + h);
    }
}

/// `out = op(A)[:, p0..p1] * op(B)[p0..p1, :]` (m x n) by rank-4 updates, then single
/// products; with f16 compute the sums are rounded every `PANEL_SETTLE_STEPS` steps.
fn panel_range<P: Policy>(o: &Operands<P::E>, p0: usize, p1: usize, out: &mut [P::A]) {
    let m = o.m;
    out.fill(P::A::ZERO);
    let mut cols = vec![P::A::ZERO; 4 * m];
    let widen = |cols: &mut [P::A], p: usize, r: usize| {
        for (i, t) in cols[r * m..(r + 1) * m].iter_mut().enumerate() {
            *t = ld::<P>(o.a(i, p));
        }
    };
    let mut p = p0;
    let mut steps = 0;
    while p + 4 <= p1 {
        for r in 0..4 {
            widen(&mut cols, p + r, r);
        }
        let (a0, rest) = cols.split_at(m);
        let (a1, rest) = rest.split_at(m);
        let (a2, a3) = rest.split_at(m);
        for (j, col) in out.chunks_exact_mut(m).enumerate() {
            let b = [
                ld::<P>(o.b(p, j)),
                ld::<P>(o.b(p + 1, j)),
                ld::<P>(o.b(p + 2, j)),
                ld::<P>(o.b(p + 3, j)),
            ];
            for i in 0..m {
                let g = (a0[i] * b[0] + a1[i] * b[1]) + (a2[i] * b[2] + a3[i] * b[3]);
                col[i] = col[i] + g;
            }
        }
        p += 4;
        steps += 1;
        if steps % PANEL_SETTLE_STEPS == 0 {
            out.iter_mut().for_each(|t| *t = P::settle(*t));
        }
    }
    while p < p1 {
        widen(&mut cols, p, 0);
        for (j, col) in out.chunks_exact_mut(m).enumerate() {
            let bv = ld::<P>(o.b(p, j));
            for (t, &a) in col.iter_mut().zip(&cols[..m]) {
                *t = *t + a * bv;
            }
        }
        p += 1;
    }
    out.iter_mut().for_each(|t| *t = P::settle(*t));
}

/// k-block of the register-blocked kernel.
const REG_KC: usize = 128;

/// Register-blocked kernel: packs op(A) into strips of 4 rows and op(B) into strips of 4
/// columns, and computes each 4x4 output tile in registers. Within a 128-wide k-block the two
/// halves are summed apart (two independent chains) and then added. Only accepts m and n that
/// are multiples of 4: it has no edge handling, like a GPU kernel without bounds checks.
fn reg4x4<P: Policy>(o: &Operands<P::E>, acc: &mut [P::A]) {
    let (m, n, k) = (o.m, o.n, o.k);
    assert!(
        m % 4 == 0 && n % 4 == 0,
        "reg4x4 needs m and n multiples of 4"
    );
    let (mut ap, mut bp) = panel_buffers::<P>(m, n, REG_KC.min(k));
    acc.fill(P::A::ZERO);
    for (pc, kc) in k_blocks(k, REG_KC) {
        // Strip s of A holds rows 4s..4s+4 as ap[s*4*kc + pp*4 + r].
        for i in 0..m {
            let (s, r) = (i / 4, i % 4);
            for pp in 0..kc {
                ap[s * 4 * kc + pp * 4 + r] = ld::<P>(o.a(i, pc + pp));
            }
        }
        for j in 0..n {
            let (t, c) = (j / 4, j % 4);
            for pp in 0..kc {
                bp[t * 4 * kc + pp * 4 + c] = ld::<P>(o.b(pc + pp, j));
            }
        }
        let lo_len = kc.div_ceil(2);
        let hi_len = kc - lo_len;
        for t in 0..n / 4 {
            let bs = &bp[t * 4 * kc..(t + 1) * 4 * kc];
            for s in 0..m / 4 {
                let as_ = &ap[s * 4 * kc..(s + 1) * 4 * kc];
                let mut lo = [[P::A::ZERO; 4]; 4];
                let mut hi = [[P::A::ZERO; 4]; 4];
                for pp in 0..hi_len {
                    let (al, bl) = (&as_[pp * 4..pp * 4 + 4], &bs[pp * 4..pp * 4 + 4]);
                    let q = lo_len + pp;
                    let (ah, bh) = (&as_[q * 4..q * 4 + 4], &bs[q * 4..q * 4 + 4]);
                    for c in 0..4 {
                        for r in 0..4 {
                            lo[c][r] = lo[c][r] + al[r] * bl[c];
                            hi[c][r] = hi[c][r] + ah[r] * bh[c];
                        }
                    }
                }
                if lo_len > hi_len {
                    // Odd block: the last product of the low half comes last in its chain.
                    let q = lo_len - 1;
                    let (al, bl) = (&as_[q * 4..q * 4 + 4], &bs[q * 4..q * 4 + 4]);
                    for c in 0..4 {
                        for r in 0..4 {
                            lo[c][r] = lo[c][r] + al[r] * bl[c];
                        }
                    }
                }
                for c in 0..4 {
                    for r in 0..4 {
                        let dst = &mut acc[(4 * s + r) + (4 * t + c) * m];
                        *dst = P::settle(*dst + (lo[c][r] + hi[c][r]));
                    }
                }
            }
        }
    }
}

/// k-block of the gemv kernel (one f16 rounding per block with f16 compute).
const GEMV_BLOCK: usize = 64;

/// Four-lane dot product `(s0 + s1) + (s2 + s3)`, lane = p mod 4.
#[inline(always)]
fn dot4<A: Acc>(x: &[A], y: &[A]) -> A {
    let mut s = [A::ZERO; 4];
    let mut xs = x.chunks_exact(4);
    let mut ys = y.chunks_exact(4);
    for (xq, yq) in (&mut xs).zip(&mut ys) {
        for l in 0..4 {
            s[l] = s[l] + xq[l] * yq[l];
        }
    }
    for (l, (&xl, &yl)) in xs.remainder().iter().zip(ys.remainder()).enumerate() {
        s[l] = s[l] + xl * yl;
    }
    (s[0] + s[1]) + (s[2] + s[3])
}

/// The gemv path: packs op(A)'s rows and op(B)'s columns whole, then a four-lane dot
/// product per element, in 64-wide k-blocks. Meant for m == 1 or n == 1, where one operand is
/// a vector and packing the other costs one pass.
fn gemv<P: Policy>(o: &Operands<P::E>, acc: &mut [P::A]) {
    let (m, n, k) = (o.m, o.n, o.k);
    let mut ap = vec![P::A::ZERO; m * k];
    let mut bp = vec![P::A::ZERO; n * k];
    pack_a_rows::<P>(o, 0, k, &mut ap);
    pack_b_cols::<P>(o, 0, k, &mut bp);
    for j in 0..n {
        let y = &bp[j * k..(j + 1) * k];
        for i in 0..m {
            let x = &ap[i * k..(i + 1) * k];
            let mut s = P::A::ZERO;
            for (xb, yb) in x.chunks(GEMV_BLOCK).zip(y.chunks(GEMV_BLOCK)) {
                s = P::settle(s + dot4(xb, yb));
            }
            acc[i + j * m] = s;
        }
    }
}
