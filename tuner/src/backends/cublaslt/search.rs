//! The wider search, within the shape's screening budget: beyond the heuristic's answers,
//! the configurations cuBLASLt says it has for the shape's types (`cublasLtMatmulAlgoGetIds`,
//! then each algorithm's capabilities: tiles, stages, split-K and its reduction schemes, CTA
//! swizzling, custom options; cluster shapes are tried and left to the check), each rebuilt
//! as the interposer rebuilds it, validated with `cublasLtMatmulAlgoCheck` and probed once.
//!
//! Two phases: (1) every (algorithm, tile, stages) with split-K 1 and the answers' cluster
//! shapes, the heuristic's own algorithm first; (2) around the few fastest probes: every
//! cluster shape x custom option, swizzling, and split-K with each reduction scheme. The
//! fastest probes go on to numerics and the trials like the heuristic's answers.

use std::collections::HashSet;

use serde::Serialize;
use tunedblas_core::cublaslt::*;

use super::{Cublaslt, CublasltSession};
use crate::backends::lt::{Flavor, LtProblem};
use crate::bench::{Cand, Screen};

/// `cublasLtMatmulAlgoCapAttributes_t` values the search reads.
pub const CAP_SPLITK_SUPPORT: i32 = 0;
pub const CAP_REDUCTION_SCHEME_MASK: i32 = 1;
pub const CAP_CTA_SWIZZLING_SUPPORT: i32 = 2;
pub const CAP_TILE_IDS: i32 = 6;
pub const CAP_STAGES_IDS: i32 = 13;

/// Cluster shapes tried (`cublasLtClusterShape_t`: 0 auto, 2 = 1x1x1 .. 16 = 1x16x1); the
/// library has no capability that lists them, so `cublasLtMatmulAlgoCheck` decides.
pub const CLUSTER_SHAPES: [u32; 16] = [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
/// Split-K factors tried where the algorithm supports split-K and each part keeps at least
/// [`MIN_K_PER_SPLIT`] of K.
pub const SPLITS: [u32; 7] = [2, 3, 4, 6, 8, 12, 16];
pub const MIN_K_PER_SPLIT: i64 = 128;
/// Share of the budget the first phase may use.
const PHASE1_SHARE: f64 = 0.55;
/// Configurations refined in the second phase.
const BASES: usize = 4;

/// What one algorithm id offers (`cublasLtMatmulAlgoCapGetAttribute`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Caps {
    pub tiles: Vec<u32>,
    pub stages: Vec<u32>,
    pub splitk: bool,
    pub reduction_mask: u32,
    pub swizzle: bool,
    pub custom_max: u32,
}

/// The algorithm ids the library has for the key's types (empty where it cannot say).
// The handle is opaque, passed to the library, never dereferenced here.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn algo_ids(lt: &Cublaslt, handle: LtHandle, key: &LtKey) -> Vec<i32> {
    let Some(get) = lt.get_ids else {
        return Vec::new();
    };
    let mut ids = vec![0i32; 512];
    let mut n = 0i32;
    let (k, len) = (key, ids.len() as i32);
    // SAFETY: ids has room for the count given; n is a valid out-pointer.
    #[rustfmt::skip]
    let st = unsafe {
        get(handle, k.compute, k.scale, k.a_type, k.b_type, k.c_type, k.d_type,
            len, ids.as_mut_ptr(), &mut n)
    };
    if st != STATUS_SUCCESS {
        return Vec::new();
    }
    ids.truncate(n.clamp(0, 512) as usize);
    ids
}

fn cap_list(lt: &Cublaslt, algo: &MatmulAlgo, attr: i32) -> Vec<u32> {
    let mut size = 0usize;
    // SAFETY: a size query (no buffer).
    let st = unsafe { (lt.cap_get)(algo, attr, std::ptr::null_mut(), 0, &mut size) };
    if st != STATUS_SUCCESS || size == 0 || !size.is_multiple_of(4) || size > 1 << 16 {
        return Vec::new();
    }
    let mut v = vec![0u32; size / 4];
    let mut w = 0usize;
    // SAFETY: v holds `size` bytes.
    let st = unsafe { (lt.cap_get)(algo, attr, v.as_mut_ptr().cast(), size, &mut w) };
    if st != STATUS_SUCCESS {
        return Vec::new();
    }
    v.truncate(w / 4);
    v
}

fn cap_u32(lt: &Cublaslt, algo: &MatmulAlgo, attr: i32) -> Option<u32> {
    let mut v = 0u32;
    let mut w = 0usize;
    // SAFETY: a 4-byte attribute into a u32.
    let st = unsafe { (lt.cap_get)(algo, attr, (&mut v as *mut u32).cast(), 4, &mut w) };
    (st == STATUS_SUCCESS && w == 4).then_some(v)
}

/// The capabilities of algorithm `id` for the key's types; `None` where the library does not
/// initialise it. An empty tile or stages list becomes `[0]` (undefined: the library's choice).
pub(crate) fn caps(lt: &Cublaslt, handle: LtHandle, key: &LtKey, id: i32) -> Option<Caps> {
    // SAFETY: the library's own function; the handle is live.
    let algo = unsafe { tunedblas_lt_algo::init_algo(lt.algo_init, handle, key, id) }.ok()?;
    let or_undefined = |v: Vec<u32>| if v.is_empty() { vec![0] } else { v };
    Some(Caps {
        tiles: or_undefined(cap_list(lt, &algo, CAP_TILE_IDS)),
        stages: or_undefined(cap_list(lt, &algo, CAP_STAGES_IDS)),
        splitk: cap_u32(lt, &algo, CAP_SPLITK_SUPPORT).unwrap_or(0) != 0,
        reduction_mask: cap_u32(lt, &algo, CAP_REDUCTION_SCHEME_MASK).unwrap_or(0),
        swizzle: cap_u32(lt, &algo, CAP_CTA_SWIZZLING_SUPPORT).unwrap_or(0) != 0,
        custom_max: cap_u32(lt, &algo, CAP_CUSTOM_OPTION_MAX)
            .unwrap_or(0)
            .min(15),
    })
}

/// Every algorithm the library lists for the key, with its capabilities; the seeds'
/// algorithms first (and included even where the id list lacks them).
pub fn space(
    lt: &Cublaslt,
    handle: LtHandle,
    key: &LtKey,
    seeds: &[AlgoConfig],
) -> Vec<(i32, Caps)> {
    let mut ids = Vec::new();
    for id in seeds
        .iter()
        .map(|s| s.algo)
        .chain(algo_ids(lt, handle, key))
    {
        unique(&mut ids, id);
    }
    ids.into_iter()
        .filter_map(|id| caps(lt, handle, key, id).map(|c| (id, c)))
        .collect()
}

fn unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

/// Phase one: every (algorithm, tile, stages) of `space` with split-K 1, swizzle 0, custom 0
/// and, for a seed's algorithm, the seeds' inner and cluster shapes (else inner 0, clusters
/// auto and 1x1x1). Order: the space's order (seeds' algorithms first), and within an
/// algorithm the seeds' stages before the others; seeds themselves left out.
pub fn tile_configs(seeds: &[AlgoConfig], space: &[(i32, Caps)]) -> Vec<AlgoConfig> {
    let mut out = Vec::new();
    let mut have: HashSet<AlgoConfig> = seeds.iter().copied().collect();
    for (id, caps) in space {
        let mine: Vec<&AlgoConfig> = seeds.iter().filter(|s| s.algo == *id).collect();
        let (mut clusters, mut inners, mut stages) = (Vec::new(), Vec::new(), Vec::new());
        for s in &mine {
            unique(&mut clusters, s.cluster_shape);
            unique(&mut inners, s.inner_shape);
            if caps.stages.contains(&s.stages) || caps.stages == [0] {
                unique(&mut stages, s.stages);
            }
        }
        if mine.is_empty() {
            clusters = vec![0, 2];
            inners = vec![0];
        }
        for &st in &caps.stages {
            unique(&mut stages, st);
        }
        for &st in &stages {
            for &tile in &caps.tiles {
                for &inner in &inners {
                    for &cluster in &clusters {
                        let c = AlgoConfig {
                            algo: *id,
                            tile,
                            stages: st,
                            splitk: 1,
                            reduction: 0,
                            swizzle: 0,
                            custom: 0,
                            inner_shape: inner,
                            cluster_shape: cluster,
                        };
                        if have.insert(c) {
                            out.push(c);
                        }
                    }
                }
            }
        }
    }
    out
}

/// Phase two, around each of `bases`: every cluster shape x custom option, CTA swizzling on,
/// and split-K (each part at least [`MIN_K_PER_SPLIT`] of `k`) with each reduction scheme
/// of the mask; what `skip` already holds left out.
pub fn refinements(
    bases: &[AlgoConfig],
    caps_of: impl Fn(i32) -> Option<Caps>,
    k: i64,
    skip: &HashSet<AlgoConfig>,
) -> Vec<AlgoConfig> {
    let mut out: Vec<AlgoConfig> = Vec::new();
    let mut have: HashSet<AlgoConfig> = HashSet::new();
    let mut add = |c: AlgoConfig, out: &mut Vec<AlgoConfig>| {
        if !skip.contains(&c) && have.insert(c) {
            out.push(c);
        }
    };
    for b in bases {
        let Some(caps) = caps_of(b.algo) else {
            continue;
        };
        for cluster in CLUSTER_SHAPES {
            for custom in 0..=caps.custom_max {
                add(
                    AlgoConfig {
                        cluster_shape: cluster,
                        custom,
                        ..*b
                    },
                    &mut out,
                );
            }
        }
        if caps.swizzle {
            add(AlgoConfig { swizzle: 1, ..*b }, &mut out);
        }
        if caps.splitk {
            for s in SPLITS
                .into_iter()
                .filter(|&s| k / s as i64 >= MIN_K_PER_SPLIT)
            {
                for bit in 0..8 {
                    let scheme = 1u32 << bit;
                    if caps.reduction_mask & scheme != 0 {
                        add(
                            AlgoConfig {
                                splitk: s,
                                reduction: scheme,
                                ..*b
                            },
                            &mut out,
                        );
                    }
                }
            }
        }
    }
    out
}

/// `cublasLtMatmulAlgoGetIds(handle, compute, scale, Atype, Btype, Ctype, Dtype, requested,
/// ids*, returned*)`.
#[rustfmt::skip]
pub type AlgoGetIdsFn = unsafe extern "C" fn(
    LtHandle, ComputeType, CudaDataType,
    CudaDataType, CudaDataType, CudaDataType, CudaDataType,
    i32, *mut i32, *mut i32,
) -> LtStatus;

/// Offers `list` to the screening, each rebuilt and checked, until `stop` says so.
pub(super) fn sweep(
    p: &LtProblem<'_, CublasltSession<'_>>,
    list: &[AlgoConfig],
    screen: &mut Screen<'_, MatmulAlgo>,
    stop: &dyn Fn(&Screen<'_, MatmulAlgo>) -> bool,
) {
    for cfg in list {
        if stop(screen) {
            screen.not_probed("left for want of time");
            continue;
        }
        match p.session.rebuild(p, cfg) {
            Ok(algo) => {
                screen.offer(Cand {
                    name: cfg.solution_name(),
                    algo,
                });
            }
            Err(why) => screen.not_probed(&why),
        }
    }
}

/// The wider search for one shape, after the heuristic's answers `seeds` were offered:
/// phase one until [`PHASE1_SHARE`] of the budget, phase two around the fastest probes
/// until it is spent.
pub fn search(
    p: &LtProblem<'_, CublasltSession<'_>>,
    seeds: &[AlgoConfig],
    screen: &mut Screen<'_, MatmulAlgo>,
) {
    let s = p.session;
    let space = space(s.lib, s.handle(), &p.key, seeds);
    let phase1 = tile_configs(seeds, &space);
    sweep(p, &phase1, screen, &|sc| sc.share_spent() >= PHASE1_SHARE);
    let bases: Vec<AlgoConfig> = screen
        .best(BASES)
        .iter()
        .filter_map(|n| AlgoConfig::parse(n).ok())
        .collect();
    let caps_of = |id: i32| space.iter().find(|s| s.0 == id).map(|s| s.1.clone());
    let tried: HashSet<AlgoConfig> = seeds.iter().chain(&phase1).copied().collect();
    let phase2 = refinements(&bases, caps_of, p.key.k, &tried);
    sweep(p, &phase2, screen, &|sc| sc.spent());
}
