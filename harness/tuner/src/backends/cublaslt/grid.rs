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
    (2, 1, 1),
    (3, 2, 1),
    (4, 4, 1),
    (5, 1, 2),
    (6, 2, 2),
    (7, 4, 2),
    (8, 1, 4),
    (9, 2, 4),
    (10, 4, 4),
    (11, 8, 1),
    (12, 1, 8),
    (13, 8, 2),
    (14, 2, 8),
    (15, 16, 1),
    (16, 1, 16),
    (17, 3, 1),
    (18, 5, 1),
    (19, 6, 1),
    (20, 7, 1),
    (21, 9, 1),
    (22, 10, 1),
    (23, 11, 1),
    (24, 12, 1),
    (25, 13, 1),
    (26, 14, 1),
    (27, 15, 1),
    (28, 3, 2),
    (29, 5, 2),
    (30, 6, 2),
    (31, 7, 2),
    (32, 1, 3),
    (33, 2, 3),
    (34, 3, 3),
    (35, 4, 3),
    (36, 5, 3),
    (37, 3, 4),
    (38, 1, 5),
    (39, 2, 5),
    (40, 3, 5),
    (41, 1, 6),
    (42, 2, 6),
    (43, 1, 7),
    (44, 2, 7),
    (45, 1, 9),
    (46, 1, 10),
    (47, 1, 11),
    (48, 1, 12),
    (49, 1, 13),
    (50, 1, 14),
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
    match grid {
        Some(g) if g.waves < 1.0 => parts.push(format!(
            "{} CTAs ({} tiles) on {} SMs: {:.0}% of the SMs idle",
            g.ctas,
            g.tile,
            g.sms,
            100.0 * (1.0 - g.waves)
        )),
        Some(g) if b == Bound::Compute && g.waves < 4.0 && g.last_wave_fill < 0.75 => {
            parts.push(format!(
                "{} CTAs ({} tiles) = {:.2} waves on {} SMs: the last wave {:.0}% full",
                g.ctas,
                g.tile,
                g.waves,
                g.sms,
                100.0 * g.last_wave_fill
            ))
        }
        Some(g) => parts.push(format!(
            "{} CTAs ({} tiles), {:.2} waves: the SMs are busy, the rest is the kernel",
            g.ctas, g.tile, g.waves
        )),
        None => parts.push("grid unknown (tile or cluster id not in the tables)".into()),
    }
    if floor_share >= 0.15 {
        parts.push(format!(
            "one launch's floor is {:.0}% of the time",
            100.0 * floor_share
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunedblas_core::cublaslt::R_16BF;

    fn cfg(tile: u32, splitk: u32, cluster: u32) -> AlgoConfig {
        AlgoConfig {
            algo: 66,
            tile,
            stages: 35,
            splitk,
            reduction: 0,
            swizzle: 0,
            custom: 0,
            inner_shape: 0,
            cluster_shape: cluster,
        }
    }

    #[test]
    fn the_tile_table_reads_the_header_ids() {
        // Spot checks against cublasLt.h: ids seen in the H200 campaigns.
        assert_eq!(tile_dims(10), Some((64, 8)));
        assert_eq!(tile_dims(20), Some((128, 128)));
        assert_eq!(tile_dims(30), Some((160, 128)));
        assert_eq!(tile_dims(135), Some((80, 128)));
        assert_eq!(tile_dims(248), Some((320, 128)));
        assert_eq!(tile_dims(393), Some((128, 8)));
        assert_eq!(tile_dims(0), None, "undefined");
        assert_eq!(tile_dims(99_999), None);
    }

    #[test]
    fn grid_counts_tiles_cluster_rounding_and_split_k() {
        // 512x2560 at M = 1 with 64x8 tiles, split-K 8: 8 x 1 x 8 = 64 CTAs on 132 SMs.
        let k = LtKey::linear(R_16BF, 512, 1, 2560);
        let g = grid(&k, &cfg(10, 8, 2), 132).unwrap();
        assert_eq!((g.ctas, g.tile.as_str()), (64, "64x8"));
        assert!((g.waves - 64.0 / 132.0).abs() < 1e-12);
        // 10240x2560 at M = 2048 with 160x128 tiles: 64 x 16 = 1024 CTAs = 7.76 waves.
        let k = LtKey::linear(R_16BF, 10240, 2048, 2560);
        let g = grid(&k, &cfg(30, 1, 2), 132).unwrap();
        assert_eq!(g.ctas, 1024);
        assert!((g.last_wave_fill - 100.0 / 132.0).abs() < 1e-12);
        // A 2x1 cluster rounds 63 row tiles up to 64; 1x2 rounds 1 column tile up to 2.
        let k = LtKey::linear(R_16BF, 63 * 128, 128, 64);
        assert_eq!(grid(&k, &cfg(20, 1, 3), 132).unwrap().ctas, 64);
        assert_eq!(grid(&k, &cfg(20, 1, 5), 132).unwrap().ctas, 126);
        // A full last wave.
        let k = LtKey::linear(R_16BF, 132 * 128, 128, 64);
        assert_eq!(grid(&k, &cfg(20, 1, 2), 132).unwrap().last_wave_fill, 1.0);
        assert!(grid(&k, &cfg(99_999, 1, 2), 132).is_none());
        // The ids past 27 are 2-D too: 1x3 (32) rounds 1 column tile up to 3; an unknown
        // cluster id gives no grid rather than a wrong one; auto (0) counts tiles alone.
        assert_eq!(grid(&k, &cfg(20, 1, 32), 132).unwrap().ctas, 132 * 3);
        assert_eq!(cluster_dims(51), Some((1, 15)));
        assert!(grid(&k, &cfg(20, 1, 52), 132).is_none());
        assert_eq!(grid(&k, &cfg(20, 1, 0), 132).unwrap().ctas, 132);
        // A key that limits cuBLASLt to 66 SMs is set against 66.
        let mut half = k;
        half.sm_count = 66;
        assert_eq!(grid(&half, &cfg(20, 1, 2), 132).unwrap().waves, 2.0);
    }

    #[test]
    fn the_line_says_why_the_fastest_is_where_it_is() {
        let few = Grid {
            tile: "64x8".into(),
            ctas: 64,
            sms: 132,
            waves: 64.0 / 132.0,
            last_wave_fill: 64.0 / 132.0,
        };
        let w = why(Bound::Memory, 15.0, Some(&few), 0.2);
        assert!(
            w.contains("64 CTAs") && w.contains("52% of the SMs idle"),
            "{w}"
        );
        assert!(w.contains("floor is 20%"), "{w}");
        let tail = Grid {
            tile: "160x128".into(),
            ctas: 160,
            sms: 132,
            waves: 160.0 / 132.0,
            last_wave_fill: 28.0 / 132.0,
        };
        let w = why(Bound::Compute, 60.0, Some(&tail), 0.0);
        assert!(w.contains("1.21 waves") && w.contains("21% full"), "{w}");
        // A memory-bound shape with a partial last wave: the tail is not the reason given.
        let w = why(Bound::Memory, 60.0, Some(&tail), 0.0);
        assert!(w.contains("the rest is the kernel"), "{w}");
        assert!(why(Bound::Memory, 90.0, None, 0.0).starts_with("at 90% of the memory limit"));
    }
}
