/* A hipBLASLt host for the conformance suite, built inside the root against the real
 * hipblaslt.h and linked against the real libhipblaslt.so.1 (tests/conformance/hosts.rs).
 * It makes PyTorch's F.linear calls as PyTorch's hipBLASLt path does, argument by argument
 * `N,M,K` (x[M,K] times W[N,K]^T, bf16, f32 compute): a matmul descriptor made with
 * HIPBLAS_COMPUTE_32F / HIP_R_32F, TRANSA = T, TRANSB = N, three layouts (C and D share
 * one), hipblasLtMatmul with no algorithm and no workspace, everything destroyed after.
 * With no GPU hipblasLtCreate ends the process (hipBLASLt 7.1.1 exits on "no ROCm-capable
 * device"), so the handle is made only with `--create`; the matmuls then get a NULL handle
 * and fail, and everything before is the real library's. Prints `call=<arg> status=<s>`. */
#include <hipblaslt/hipblaslt.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char **argv) {
    hipblasLtHandle_t handle = nullptr;
    int st = 0, first = 1;
    if (argc > 1 && std::strcmp(argv[1], "--create") == 0) {
        st = hipblasLtCreate(&handle);
        std::printf("create=%d\n", st);
        first = 2;
    }
    for (int i = first; i < argc; i++) {
        long n, m, k;
        if (std::sscanf(argv[i], "%ld,%ld,%ld", &n, &m, &k) != 3) {
            std::printf("call=%s bad\n", argv[i]);
            return 2;
        }
        hipblasLtMatmulDesc_t desc = nullptr;
        hipblasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        int made = hipblasLtMatmulDescCreate(&desc, HIPBLAS_COMPUTE_32F, HIP_R_32F);
        hipblasOperation_t t = HIPBLAS_OP_T, nop = HIPBLAS_OP_N;
        made |= hipblasLtMatmulDescSetAttribute(desc, HIPBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
        made |= hipblasLtMatmulDescSetAttribute(desc, HIPBLASLT_MATMUL_DESC_TRANSB, &nop, sizeof nop);
        made |= hipblasLtMatrixLayoutCreate(&a, HIP_R_16BF, k, n, k);
        made |= hipblasLtMatrixLayoutCreate(&b, HIP_R_16BF, k, m, k);
        /* C and D are made with a wrong leading dimension first and set right after, as a
         * caller reusing a layout does: the key must follow the set. */
        made |= hipblasLtMatrixLayoutCreate(&c, HIP_R_16BF, n, m, n + 1);
        int64_t ld = n;
        made |= hipblasLtMatrixLayoutSetAttribute(c, HIPBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld);
        if (made) {
            std::printf("call=%s setup=%d\n", argv[i], made);
            return 1;
        }
        float alpha = 1, beta = 0;
        st = hipblasLtMatmul(handle, desc, &alpha, nullptr, a, nullptr, b, &beta, nullptr, c, nullptr, c,
                             nullptr, nullptr, 0, nullptr);
        std::printf("call=%s status=%d\n", argv[i], st);
        hipblasLtMatrixLayoutDestroy(c);
        hipblasLtMatrixLayoutDestroy(b);
        hipblasLtMatrixLayoutDestroy(a);
        hipblasLtMatmulDescDestroy(desc);
    }
    if (handle) hipblasLtDestroy(handle);
    return 0;
}
