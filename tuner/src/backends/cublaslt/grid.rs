//! Why a GEMM runs where it does against its limit ([`crate::limits`]): the grid a cuBLASLt
//! configuration launches (tiles of D, cluster rounding, split-K parts) on the card's SMs.
//!
//! Issue 15 asks that where no configuration reaches the target, the table say per shape how
//! far the best one is from the limit *and why*. Bandwidth alone cannot say it: prefill shapes
//! are compute-bound, and decode shapes with fewer CTAs than SMs cannot pull the card's
//! bandwidth however fast each CTA streams. The grid is computed, not measured: it is what
//! the configuration asks the hardware for, and it is reported with the numbers it came from.

use serde::{Deserialize, Serialize};
use tunedblas_core::cublaslt::{AlgoConfig, LtKey};

use crate::limits::Bound;

/// `cublasLtMatmulTile_t`: "id ROWSxCOLS" per line, made from cuBLASLt 13.1's header by
/// `scripts/cublaslt-tiles`. The ids are stable across releases (new tiles are appended).
const TILES: &str = include_str!("cublaslt_tiles.txt");

/// Rows x columns of D one CTA computes with tile `id`, where the table knows it.
pub fn tile_dims(id: u32) -> Option<(u32, u32)> {
    let want = id.to_string();
    TILES.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (i, dims) = l.split_once(' ')?;
        (i == want)
            .then_some(dims)?
            .split_once('x')
            .and_then(|(r, c)| Some((r.parse().ok()?, c.parse().ok()?)))
    })
}

/// `cublasLtClusterShape_t` ids 2-51 as (id, CTAs along rows, CTAs along columns), from
/// cuBLASLt 13.1's header (every shape there has depth 1).
#[rustfmt::skip]
const CLUSTERS: [(u32, u32, u32); 50] = [
    (2, 1, 1), (3, 2, 1), (4, 4, 1), (5, 1, 2), (6, 2, 2), (7, 4, 2), (8, 1, 4),
    (9, 2, 4), (10, 4, 4), (11, 8, 1), (12, 1, 8), (13, 8, 2), (14, 2, 8), (15, 16, 1),
    (16, 1, 16), (17, 3, 1), (18, 5, 1), (19, 6, 1), (20, 7, 1), (21, 9, 1), (22, 10, 1),
    (23, 11, 1), (24, 12, 1), (25, 13, 1), (26, 14, 1), (27, 15, 1), (28, 3, 2), (29, 5, 2),
    (30, 6, 2), (31, 7, 2), (32, 1, 3), (33, 2, 3), (34, 3, 3), (35, 4, 3), (36, 5, 3),
    (37, 3, 4), (38, 1, 5), (39, 2, 5), (40, 3, 5), (41, 1, 6), (42, 2, 6), (43, 1, 7),
    (44, 2, 7), (45, 1, 9), (46, 1, 10), (47, 1, 11), (48, 1, 12), (49, 1, 13), (50, 1, 14),
    (51, 1, 15),
];

/// Cluster shape (`cublasLtClusterShape_t`) as CTAs along rows x columns: (1, 1) for auto
/// (0: the kernel's own), `None` for an id this table does not know.
pub fn cluster_dims(id: u32) -> Option<(u32, u32)> {
    if id == 0 {
        return Some((1, 1));
    }
    CLUSTERS.iter().find(|c| c.0 == id).map(|&(_, r, c)| (r, c))
}

/// The grid one call asks for on a card with `sms` SMs: its output tiles (times split-K
/// parts), which is the number of CTAs for a kernel that launches one per tile. Hopper's
/// persistent kernels launch fewer CTAs and loop over the tiles, and small tiles can share an
/// SM; the tile count against the SMs still says whether there is work for every SM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    pub tile: String,
    /// Units of work ("CTAs" in the reports): row tiles x column tiles (each rounded up to
    /// the cluster) x split-K parts x batch.
    pub ctas: u64,
    pub sms: u32,
    /// CTAs / SMs: under 1, some SMs have nothing to do.
    pub waves: f64,
    /// Share of the SM slots of the last wave that hold a CTA (1 = every wave full).
    pub last_wave_fill: f64,
}

/// The grid of `cfg` on `key` (`key.m` rows and `key.n` columns of D), or `None` where the
/// tile or cluster id is unknown. Waves count one unit per SM at a time. A key that limits
/// its SMs (`sm_count`) is set against that many.
pub fn grid(key: &LtKey, cfg: &AlgoConfig, sms: u32) -> Option<Grid> {
    let (tr, tc) = tile_dims(cfg.tile)?;
    let (cr, cc) = cluster_dims(cfg.cluster_shape)?;
    let sms = match key.sm_count {
        n if n > 0 => (n as u32).min(sms),
        _ => sms,
    };
    // Tiles along one side of D, rounded up to whole clusters.
    let side = |extent: i64, tile: u32, cluster: u32| {
        let c = cluster.max(1) as u64;
        (extent.max(1) as u64)
            .div_ceil(tile.max(1) as u64)
            .div_ceil(c)
            * c
    };
    let rows = side(key.m, tr, cr);
    let cols = side(key.n, tc, cc);
    let ctas = rows * cols * cfg.splitk.max(1) as u64 * key.batch.max(1) as u64;
    let sms = sms.max(1);
    let waves = ctas as f64 / sms as f64;
    let last = ctas - (ctas.saturating_sub(1) / sms as u64) * sms as u64;
    Some(Grid {
        tile: format!("{tr}x{tc}"),
        ctas,
        sms,
        waves,
        last_wave_fill: last as f64 / sms as f64,
    })
}

/// One line saying why a configuration of `grid` runs at `pct` of a `b`-bound limit: the
/// grid's share of the SMs where it leaves some idle, the partial last wave where it costs a
/// compute-bound shape, else the kernel itself.
pub fn why(b: Bound, pct: f64, grid: Option<&Grid>, floor_share: f64) -> String {
    let mut parts = Vec::new();
    if pct >= 85.0 {
        parts.push(format!("at {pct:.0}% of the {} limit", b.name()));
    }
    parts.push(match grid {
        Some(g) if g.waves < 1.0 => format!(
            "{} CTAs ({} tiles) on {} SMs: {:.0}% of the SMs idle",
            g.ctas,
            g.tile,
            g.sms,
            100.0 * (1.0 - g.waves)
        ),
        Some(g) if b == Bound::Compute && g.waves < 4.0 && g.last_wave_fill < 0.75 => format!(
            "{} CTAs ({} tiles) = {:.2} waves on {} SMs: the last wave {:.0}% full",
            g.ctas,
            g.tile,
            g.waves,
            g.sms,
            100.0 * g.last_wave_fill
        ),
        Some(g) => format!(
            "{} CTAs ({} tiles), {:.2} waves: the SMs are busy, the rest is the kernel",
            g.ctas, g.tile, g.waves
        ),
        None => "grid unknown (tile or cluster id not in the tables)".into(),
    });
    if floor_share >= 0.15 {
        parts.push(format!(
            "one launch's floor is {:.0}% of the time",
            100.0 * floor_share
        ));
    }
    parts.join("; ")
}
