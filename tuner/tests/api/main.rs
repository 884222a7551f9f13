//! The engine's unit tests that need only its public API, one module per engine module, in
//! one test binary (each binary is a link of its own on a busy machine).

mod campaign;
mod checkpoint;
mod cublaslt_grid;
mod cublaslt_search;
mod curate;
mod error;
mod limits;
mod numerics;
mod pipeline;
mod rest;
mod stand_ins;
mod store;
mod timer;
