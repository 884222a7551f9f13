/* The cuBLASLt test host. Built twice from this file:
 * - with -DLT_MODULE as libltmod.so, linked against libcublasLt.so.13: `lt_linear` issues a
 *   bf16 F.linear the way PyTorch's cuBLASLt path does (descriptors, heuristic with one
 *   answer, cublasLtMatmul with that answer), calling cublasLtMatmul through its PLT;
 * - as the program lt_host, which loads that module with RTLD_LOCAL (as Python loads
 *   extension modules, so cuBLASLt sits in a local scope) and runs each argument:
 *     N,M,K[,workspace_bytes[,misalign]]   one F.linear(x[M,K], W[N,K])
 *     off | on                            tunedblas_cublaslt_serving(0 | 1), if preloaded
 *   printing `call=<arg> status=<s>`; exit 1 if any call failed. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LT_MODULE
typedef struct { uint64_t data[8]; } Algo;
typedef struct { Algo algo; size_t workspace; int32_t state; float waves; int32_t reserved[4]; } Result;
int cublasLtCreate(void **h);
int cublasLtMatmulDescCreate(void **d, int32_t compute, int32_t scale);
int cublasLtMatmulDescDestroy(void *d);
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *buf, size_t size);
int cublasLtMatrixLayoutCreate(void **l, uint32_t type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutDestroy(void *l);
int cublasLtMatmulPreferenceCreate(void **p);
int cublasLtMatmulPreferenceDestroy(void *p);
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t size);
int cublasLtMatmulAlgoGetHeuristic(void *h, void *d, void *A, void *B, void *C, void *D, void *p,
                                   int requested, Result *out, int *returned);
int cublasLtMatmul(void *h, void *desc, const void *alpha, const void *A, void *Ad, const void *B,
                   void *Bd, const void *beta, const void *C, void *Cd, void *D, void *Dd,
                   const Algo *algo, void *ws, size_t ws_bytes, void *stream);

static void *handle;
static char *buffer;

int lt_linear(long n_out, long tokens, long k, size_t ws_bytes, int misalign) {
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
        st = cublasLtMatmul(handle, desc, &alpha, buffer + (misalign ? 2 : 0), A, buffer + 4096,
                            B, &beta, buffer + 8192, C, buffer + 8192, C, &r.algo,
                            ws_bytes ? buffer + 65536 : NULL, ws_bytes, NULL);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(A);
    cublasLtMatrixLayoutDestroy(B);
    cublasLtMatrixLayoutDestroy(C);
    cublasLtMatmulDescDestroy(desc);
    return st;
}
#else
int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lt_host MODULE CALL...\n");
        return 2;
    }
    void *mod = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!mod) {
        fprintf(stderr, "lt_host: %s\n", dlerror());
        return 2;
    }
    int (*linear)(long, long, long, size_t, int) = (int (*)(long, long, long, size_t, int))dlsym(mod, "lt_linear");
    int (*serving)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "tunedblas_cublaslt_serving");
    int failed = 0;
    for (int i = 2; i < argc; i++) {
        int st;
        if (!strcmp(argv[i], "off") || !strcmp(argv[i], "on")) {
            st = serving ? (serving(argv[i][1] == 'n'), 0) : -1;
        } else {
            long n = 0, m = 0, k = 0, misalign = 0;
            unsigned long ws = 0;
            if (sscanf(argv[i], "%ld,%ld,%ld,%lu,%ld", &n, &m, &k, &ws, &misalign) < 3) return 2;
            st = linear(n, m, k, ws, (int)misalign);
        }
        printf("call=%s status=%d\n", argv[i], st);
        failed |= st != 0;
    }
    return failed;
}
#endif
