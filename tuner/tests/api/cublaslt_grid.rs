//! cuBLASLt's launch grids (`tunedblas_tuner::backends::cublaslt::grid`) through their public API.

use tunedblas_core::cublaslt::R_16BF;
use tunedblas_core::cublaslt::{AlgoConfig, LtKey};
use tunedblas_tuner::backends::cublaslt::grid::*;
use tunedblas_tuner::limits::Bound;

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
