/* hipblas_host: a host calling REAL hipBLAS (built inside the conformance root against its
 * headers, -DHIPBLAS_V2 as ROCm 6 builds use), the way llama.cpp's HIP backend and PyTorch's
 * bf16 path do. hipBLAS turns each call into the rocBLAS call the interposer sees:
 * hipblasGemmEx -> rocblas_gemm_ex (d = c), hipblasGemmStridedBatchedEx ->
 * rocblas_gemm_strided_batched_ex, hipblasHgemm / hipblasSgemm -> rocblas_hgemm / sgemm.
 * With no GPU hipblasCreate fails and the handle stays NULL; every call is still made and its
 * status printed.
 *
 * usage: hipblas_host CALL...
 *   CALL = gemmex:M:N:K (f16 in/out, f32 compute, TN) | gemmexb:M:N:K (bf16, f32 compute, TN)
 *        | sbex:M:N:K (f16, f32 compute, NN, batch 3) | hgemm:M:N:K (NN) | sgemm:M:N:K (TN)
 *   prints: create=<status> handle=<null|set>, then call=<CALL> status=<status> per CALL
 */
#include <hipblas/hipblas.h>
#include <stdio.h>
#include <string.h>

static char buf[1 << 16];

static int call(hipblasHandle_t h, const char *kind, int m, int n, int k) {
    float alpha = 1.0f, beta = 0.0f;
    hipblasHalf alpha_h = 0x3c00, beta_h = 0;
    if (!strcmp(kind, "gemmex") || !strcmp(kind, "gemmexb")) {
        hipDataType t = !strcmp(kind, "gemmex") ? HIP_R_16F : HIP_R_16BF;
        return hipblasGemmEx(h, HIPBLAS_OP_T, HIPBLAS_OP_N, m, n, k, &alpha, buf, t, k, buf, t, k, &beta, buf, t, m,
                             HIPBLAS_COMPUTE_32F, HIPBLAS_GEMM_DEFAULT);
    }
    if (!strcmp(kind, "sbex"))
        return hipblasGemmStridedBatchedEx(h, HIPBLAS_OP_N, HIPBLAS_OP_N, m, n, k, &alpha, buf, HIP_R_16F, m,
                                           (long long)m * k, buf, HIP_R_16F, k, (long long)k * n, &beta, buf,
                                           HIP_R_16F, m, (long long)m * n, 3, HIPBLAS_COMPUTE_32F,
                                           HIPBLAS_GEMM_DEFAULT);
    if (!strcmp(kind, "hgemm"))
        return hipblasHgemm(h, HIPBLAS_OP_N, HIPBLAS_OP_N, m, n, k, &alpha_h, (const hipblasHalf *)buf, m,
                            (const hipblasHalf *)buf, k, &beta_h, (hipblasHalf *)buf, m);
    if (!strcmp(kind, "sgemm"))
        return hipblasSgemm(h, HIPBLAS_OP_T, HIPBLAS_OP_N, m, n, k, &alpha, (const float *)buf, k,
                            (const float *)buf, k, &beta, (float *)buf, m);
    return -2;
}

int main(int argc, char **argv) {
    hipblasHandle_t h = NULL;
    hipblasStatus_t created = hipblasCreate(&h);
    printf("create=%d handle=%s\n", (int)created, h ? "set" : "null");
    for (int i = 1; i < argc; i++) {
        char kind[16] = {0};
        int m, n, k;
        if (sscanf(argv[i], "%15[^:]:%d:%d:%d", kind, &m, &n, &k) != 4) {
            fprintf(stderr, "hipblas_host: bad call %s\n", argv[i]);
            return 2;
        }
        printf("call=%s status=%d\n", argv[i], call(h, kind, m, n, k));
    }
    if (h) hipblasDestroy(h);
    fflush(stdout);
    return 0;
}
