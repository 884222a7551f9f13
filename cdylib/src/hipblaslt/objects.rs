//! What hipBLASLt will not tell back about its descriptors, kept from the calls that made
//! them (`crate::lt::objects`).
//!
//! hipBLASLt 7.1.1 takes a matmul descriptor's compute and scale types at
//! `hipblasLtMatmulDescCreate` and has no attribute to read them; and its
//! `hipblasLtMatrixLayoutGetAttribute` answers only the batch count and stride: type, order,
//! rows, columns and leading dimension return `HIPBLAS_STATUS_INVALID_VALUE` (measured on
//! the real library, tests/conformance/hipblaslt.rs). Yet all of them make the key. So the
//! interposer wraps the creates, `hipblasLtMatrixLayoutSetAttribute` and the destroys, and
//! keeps them.

use crate::lt::objects::Objects;

/// Matmul descriptors: [compute type, scale type, an attribute the key does not hold was
/// set (`super::key::DESC_UNSERVED`)].
pub static DESCS: Objects<3> = Objects::new("hipBLASLt: matmul descriptors");
/// Matrix layouts: each attribute at its hipBLASLt number (`HIPBLASLT_MATRIX_LAYOUT_*`: 0
/// batch count, 1 stride, 2 type, 3 order, 4 rows, 5 cols, 6 leading dimension).
pub static LAYOUTS: Objects<7> = Objects::new("hipBLASLt: matrix layouts");
