//! The engine's unit tests that need only its public API, one module per engine module, in
//! one test binary (each binary is a link of its own on a busy machine).

mod cublaslt_grid;
mod curate;
mod error;
mod limits;
mod numerics;
mod rest;
