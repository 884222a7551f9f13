//! The cuBLASLt wider search (`tunedblas_tuner::backends::cublaslt::search`) through its
//! public API: the configurations of each phase, and the stand-in's algorithms listed,
//! rebuilt and checked.

use std::collections::HashSet;

use tunedblas_core::cublaslt::*;
use tunedblas_tuner::backends::cublaslt::search::*;
use tunedblas_tuner::backends::lt::{Flavor, LtProblem};
use tunedblas_tuner::backends::Library;

use crate::stand_ins::cublaslt_stand_in;

fn cfg(algo: i32, tile: u32, stages: u32, cluster: u32) -> AlgoConfig {
    AlgoConfig {
        algo,
        tile,
        stages,
        splitk: 1,
        reduction: 0,
        swizzle: 0,
        custom: 0,
        inner_shape: 0,
        cluster_shape: cluster,
    }
}

fn without_extras(c: Caps) -> Caps {
    Caps {
        reduction_mask: 0,
        swizzle: false,
        ..c
    }
}

fn caps(tiles: &[u32], stages: &[u32], splitk: bool, custom_max: u32) -> Caps {
    Caps {
        tiles: tiles.to_vec(),
        stages: stages.to_vec(),
        splitk,
        reduction_mask: 0b11,
        swizzle: true,
        custom_max,
    }
}

#[test]
fn the_stand_ins_algorithms_are_listed_with_their_caps_and_checked() {
    let lib = cublaslt_stand_in();
    let session = lib.session(0).unwrap();
    let key = LtKey::linear(R_16BF, 2560, 256, 1536);
    let h = session.handle();
    assert_eq!(algo_ids(&lib, h, &key), [6, 21, 66, 120]);
    // The stand-in heuristic's only answer: algo 6, tile 15, stages 8.
    let seed = cfg(6, 15, 8, 0);
    let sp = space(&lib, h, &key, &[seed]);
    let ids: Vec<i32> = sp.iter().map(|s| s.0).collect();
    assert_eq!(
        ids,
        [6, 21, 66],
        "the seed's first; 120 is refused by AlgoInit"
    );
    let c66 = &sp[2].1;
    assert_eq!(c66.tiles, [15, 20, 999]);
    assert_eq!(c66.stages, [8, 35]);
    assert!(c66.splitk && c66.swizzle);
    assert_eq!((c66.reduction_mask, c66.custom_max), (3, 2));
    assert_eq!(sp[0].1, without_extras(caps(&[15], &[8], false, 0)));
    // Phase one: every tile of 66 is listed; the check refuses tile 999.
    let phase1 = tile_configs(&[seed], &sp);
    assert!(phase1.iter().any(|c| c.algo == 66 && c.tile == 999));
    let method = |ws| tunedblas_tuner::pipeline::Method {
        workspace: ws,
        ..Default::default()
    };
    let p = LtProblem::new(&session, key, &method(1 << 20)).unwrap();
    let accepted: Vec<AlgoConfig> = phase1
        .iter()
        .filter(|c| session.rebuild(&p, c).is_ok())
        .copied()
        .collect();
    assert!(!accepted.is_empty());
    assert!(accepted.iter().all(|c| c.tile != 999));
    assert_eq!(
        accepted.len(),
        phase1.len() - phase1.iter().filter(|c| c.tile == 999).count()
    );
    // Phase two around an algo-66 configuration: split-K needs 4096 bytes of workspace
    // in the stand-in, so a caller with less gets none of it.
    let base = *accepted.iter().find(|c| c.algo == 66).unwrap();
    let caps_of = |id: i32| sp.iter().find(|s| s.0 == id).map(|s| s.1.clone());
    let phase2 = refinements(&[base], caps_of, key.k, &HashSet::new());
    let split: Vec<&AlgoConfig> = phase2.iter().filter(|c| c.splitk > 1).collect();
    assert!(!split.is_empty());
    let small = LtProblem::new(&session, key, &method(1024)).unwrap();
    let big = LtProblem::new(&session, key, &method(4096)).unwrap();
    assert!(split.iter().all(|c| session.rebuild(&big, c).is_ok()));
    assert!(split.iter().all(|c| session.rebuild(&small, c).is_err()));
    assert!(phase2
        .iter()
        .any(|c| c.custom == 2 && c.cluster_shape == 16));
}

#[test]
fn phase_one_lists_each_tile_and_stage_seed_algorithm_first_seeds_left_out() {
    let seeds = [cfg(66, 20, 35, 5), cfg(66, 12, 35, 3)];
    let space = [
        (66, caps(&[12, 20, 40], &[8, 35], true, 2)),
        (6, caps(&[15], &[0], false, 0)),
    ];
    let v = tile_configs(&seeds, &space);
    // algo 66: 3 tiles x 2 stages x clusters {5, 3} = 12, minus the 2 seeds; algo 6: 1
    // tile x 1 stage x clusters {0, 2} = 2.
    assert_eq!(v.len(), 10 + 2);
    assert!(!v.contains(&seeds[0]) && !v.contains(&seeds[1]));
    assert!(v[..10].iter().all(|c| c.algo == 66));
    assert!(
        v[..4].iter().all(|c| c.stages == 35),
        "the seeds' stages first"
    );
    assert!(v.contains(&cfg(6, 15, 0, 2)) && v.contains(&cfg(6, 15, 0, 0)));
    assert!(v.iter().all(|c| c.splitk == 1 && c.custom == 0));
}

#[test]
fn phase_two_varies_cluster_custom_swizzle_and_split_k_within_the_caps() {
    let base = cfg(66, 20, 35, 5);
    let caps_of = |id: i32| (id == 66).then(|| caps(&[20], &[35], true, 1));
    // K = 320: only split 2 leaves 128 of K per part; schemes 1 and 2.
    let v = refinements(&[base], caps_of, 320, &HashSet::from([base]));
    let clusters = CLUSTER_SHAPES.len();
    assert_eq!(v.len(), clusters * 2 - 1 + 1 + 2);
    assert!(!v.contains(&base));
    assert!(v.iter().any(|c| c.swizzle == 1));
    let splits: Vec<(u32, u32)> = v
        .iter()
        .filter(|c| c.splitk > 1)
        .map(|c| (c.splitk, c.reduction))
        .collect();
    assert_eq!(splits, [(2, 1), (2, 2)]);
    // Larger K: more splits; an algorithm without split-K gets none; unknown ids nothing.
    let v = refinements(&[base], caps_of, 4096, &HashSet::new());
    assert_eq!(v.iter().filter(|c| c.splitk > 1).count(), SPLITS.len() * 2);
    let no_split = |_: i32| Some(caps(&[20], &[35], false, 0));
    assert!(refinements(&[base], no_split, 4096, &HashSet::new())
        .iter()
        .all(|c| c.splitk == 1));
    assert!(refinements(&[cfg(7, 1, 1, 0)], caps_of, 4096, &HashSet::new()).is_empty());
}
