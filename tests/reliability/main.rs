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
