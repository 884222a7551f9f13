//! `librocblas_v4.so`: refblas posing as rocBLAS 4.x (ROCm 5.5-6.4), SONAME `librocblas.so.4`.
//! All logic is in the `refblas` crate; this crate only binds the exports to the flavour.

refblas::export_rocblas!(refblas::Flavour::V4);
