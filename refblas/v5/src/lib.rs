//! `librocblas_v5.so`: refblas posing as rocBLAS 5.x (ROCm 7.x), SONAME `librocblas.so.5`.
//! All logic is in the `refblas` crate; this crate only binds the exports to the flavour.

refblas::export_rocblas!(refblas::Flavour::V5);
