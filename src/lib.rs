//! tunedblas core: everything that can be pure Rust, unit-tested without a GPU.
//!
//! - [`abi`]: the rocBLAS ABI (enums, C signatures) shared by every crate.
//! - [`address_map`]: live library objects and handles by address (slots freed on destroy).
//! - [`key`]: the problem key that identifies one GEMM problem.
//! - [`tunableop`]: PyTorch TunableOp results files (read, write, our extension rows).
//! - [`rocblas`]: rocBLAS call arguments -> problem keys.
//! - [`registry`]: `profiles.json` and `provenance.json`.
//! - [`share_lock`]: the registry's lock across the machines of a shared filesystem.
//! - [`identity`]: which library build is loaded (file, inode check, cached sha256).
//! - [`formats`]: rocBLAS bench and profile logs, rocblas-gemm-tune CSV, PyTorch exports.
//! - [`table`]: the immutable lookup table the interposer serves from.
//! - [`profile`]: choosing the profile for the loaded build, loading its rank tables.
//! - [`misslog`]: the durable record of shapes that had no row.
//! - [`family`]: problems equal but for the token count.
//! - [`misses`]: reading miss logs back: one file or folder ([`misses::file`], PyTorch
//!   untuned files too), every process and rank added up, grouped and ranked.
//! - [`near`]: serving a missed token count from the nearest row of the same layer.
//! - [`coverage`]: the shapes a serving configuration runs, checked against a profile.
//! - [`cublaslt`]: the cuBLASLt backend's key, algorithm configurations and table.
//! - [`fleet`]: a campaign's share for this machine, from Kubernetes' or Slurm's variables.
//! - [`half`]: f16 / bf16 conversions (refblas's arithmetic, the tuner's inputs and outputs).
//! - [`version`]: rocBLAS version strings (`2.47.0.`, `5.6.0.8d1ae90e`) and what they imply.

/// Constants of one C enum's type, written as the header lists them (several to a line):
/// `c_values!(Type: NAME = value, ...)`. (tests/conformance reads these blocks of
/// `src/abi.rs` to check each value against the real headers.)
macro_rules! c_values {
    ($t:ty: $($(#[$doc:meta])* $name:ident = $v:expr),+ $(,)?) => {
        $($(#[$doc])* pub const $name: $t = $v;)+
    };
}

pub mod abi;
pub mod address_map;
pub mod claim_map;
pub mod coverage;
pub mod cublaslt;
pub mod device;
pub mod elf;
pub mod family;
pub mod fleet;
pub mod formats;
pub mod half;
pub mod hipblaslt;
pub mod identity;
pub mod key;
pub mod leaked;
pub mod misses;
pub mod misslog;
pub mod near;
pub mod process;
pub mod profile;
pub mod progress;
pub mod registry;
pub mod rocblas;
pub mod settings;
pub mod share_lock;
pub mod suggest;
pub mod table;
pub mod tunableop;
pub mod version;

#[cfg(test)]
mod testing;
