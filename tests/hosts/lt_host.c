/* The cuBLASLt test host. Built twice from this file:
 * - with -DLT_MODULE as libltmod.so, linked against libcublasLt.so.13: `lt_linear` issues a
 *   bf16 F.linear the way PyTorch's cuBLASLt path does (descriptors, heuristic with one
 *   answer, cublasLtMatmul with that answer), calling cublasLtMatmul through its PLT;
 * - as the program lt_host, which loads that module with RTLD_LOCAL (so cuBLASLt sits in a
 *   local scope) and runs each argument: F.linear calls, `off`/`on`
 *   (tunedblas_cublaslt_serving) and the process-life steps, as linear_host.h describes. */
#ifdef LT_MODULE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "env_once.h"

typedef struct { uint64_t data[8]; } Algo;
#define LT(name) cublasLt##name
#include "lt_module.h"

static void *handle;
static char *buffer;

/* LT_HOST_VARIANT=stale: the descriptor is destroyed before the matmul is given it, as the
 * losing side of a caller's race meets it (another thread destroyed it meanwhile). */
int lt_linear(long n_out, long tokens, long k, size_t ws_bytes, int misalign) {
    const char *variant = ENV_ONCE("LT_HOST_VARIANT");
    int stale = variant && !strcmp(variant, "stale");
    if (!handle && cublasLtCreate(&handle) != 0) return -1;
    if (!buffer) buffer = aligned_alloc(256, 1 << 20);
    void *desc, *A, *B, *C, *pref;
    int32_t t = 1, n = 0;
    cublasLtMatmulDescCreate(&desc, 68 /* COMPUTE_32F */, 0 /* R_32F */);
    cublasLtMatmulDescSetAttribute(desc, 3, &t, 4);
    cublasLtMatmulDescSetAttribute(desc, 4, &n, 4);
    cublasLtMatrixLayoutCreate(&A, 14 /* R_16BF */, k, n_out, k);
    cublasLtMatrixLayoutCreate(&B, 14, k, tokens, k);
    cublasLtMatrixLayoutCreate(&C, 14, n_out, tokens, n_out);
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t ws = ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, 1, &ws, 8);
    Result r;
    int returned = 0;
    int st = cublasLtMatmulAlgoGetHeuristic(handle, desc, A, B, C, C, pref, 1, &r, &returned);
    if (st == 0 && returned == 1) {
        float alpha = 1, beta = 0;
        if (stale) cublasLtMatmulDescDestroy(desc);
        st = cublasLtMatmul(handle, desc, &alpha, buffer + (misalign ? 2 : 0), A, buffer + 4096,
                            B, &beta, buffer + 8192, C, buffer + 8192, C, &r.algo,
                            ws_bytes ? buffer + 65536 : NULL, ws_bytes, NULL);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(A);
    cublasLtMatrixLayoutDestroy(B);
    cublasLtMatrixLayoutDestroy(C);
    if (!stale) cublasLtMatmulDescDestroy(desc);
    return st;
}
#else
#define HOST_NAME "lt_host"
#define MODULE_ENTRY "lt_linear"
#define SERVING_ENTRY "tunedblas_cublaslt_serving"
#define MATMUL_ENTRY "cublasLtMatmul"
#define MISS_TAG "-cublaslt"
#include "linear_host.h"
#endif
