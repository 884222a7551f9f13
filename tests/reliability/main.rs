//! The reliability tests, one binary: each module is one row group of RELIABILITY.md's
//! fault matrix (`reliability::<module>::<test>` there), run against refblas under the
//! preload with the fault-injection plumbing of `tests/common/faults.rs`.

#[path = "../common/mod.rs"]
mod common;

mod concurrency;
mod input;
mod life;
mod loading;
mod lt_reload;
mod parsers;
mod registry;
mod reload;
mod security;
mod solutions;
mod store;

/// A fresh folder `tunedblas-rel-<tag>-<pid>` under the system's temporary folder, for the
/// tests of files alone (no host, no built library).
fn temp_scratch(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("tunedblas-rel-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}
