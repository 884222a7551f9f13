/* The hipBLASLt test host, lt_host.c's twin. Built twice from this file:
 * - with -DHIPLT_MODULE as libhipltmod.so, linked against libhipblaslt.so.1: `hiplt_linear`
 *   issues a bf16 F.linear the way PyTorch's hipBLASLt path does (per call: a descriptor
 *   with COMPUTE_32F and R_32F scale, TRANSA = T, TRANSB = N, layouts, a preference with the
 *   workspace limit, the heuristic with one answer, hipblasLtMatmul with that answer, every
 *   descriptor destroyed), calling hipblasLtMatmul through its PLT;
 * - as the program hiplt_host, which loads that module with RTLD_LOCAL (so hipBLASLt sits in
 *   a local scope) and runs each argument: F.linear calls, `off`/`on`
 *   (tunedblas_hipblaslt_serving) and the process-life steps, as linear_host.h describes. */
#ifdef HIPLT_MODULE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "env_once.h"

/* hipblaslt.h's values. */
enum { OP_N = 111, OP_T = 112, R_32F = 0, R_16BF = 14, COMPUTE_32F = 2 };
enum { DESC_TRANSA = 0, DESC_TRANSB = 1, DESC_A_SCALE_POINTER = 5, PREF_MAX_WORKSPACE_BYTES = 1 };
enum { LAYOUT_LD = 6 };

typedef struct { uint8_t data[16]; size_t max_workspace_bytes; } Algo;
#define LT(name) hipblasLt##name
#include "lt_module.h"

static void *handle;
static char *buffer;

/* HIPLT_HOST_VARIANT changes what every call does, as other callers of hipBLASLt would:
 *   scale   also sets HIPBLASLT_MATMUL_DESC_A_SCALE_POINTER (attribute 5) on the descriptor
 *   betaalt passes beta = 0, 1, 0, 1, ... on successive calls
 *   cd      writes D to another buffer than C (same layout)
 *   wideset sets C's leading dimension again through a 16-byte buffer (its first 8 bytes
 *           hold the value), as hipBLASLt accepts any buffer at least the attribute's size */
int hiplt_linear(long n_out, long tokens, long k, size_t ws_bytes, int misalign) {
    const char *variant = ENV_ONCE("HIPLT_HOST_VARIANT");
    variant = variant ? variant : "";
    if (!handle && hipblasLtCreate(&handle) != 0) return -1;
    if (!buffer) buffer = aligned_alloc(256, 1 << 20);
    void *desc, *A, *B, *C, *pref;
    int32_t t = OP_T, n = OP_N;
    hipblasLtMatmulDescCreate(&desc, COMPUTE_32F, R_32F);
    hipblasLtMatmulDescSetAttribute(desc, DESC_TRANSA, &t, 4);
    hipblasLtMatmulDescSetAttribute(desc, DESC_TRANSB, &n, 4);
    hipblasLtMatrixLayoutCreate(&A, R_16BF, k, n_out, k);
    hipblasLtMatrixLayoutCreate(&B, R_16BF, k, tokens, k);
    hipblasLtMatrixLayoutCreate(&C, R_16BF, n_out, tokens, !strcmp(variant, "wideset") ? n_out + 8 : n_out);
    if (!strcmp(variant, "wideset")) {
        int64_t wide[2] = {n_out, -1};
        hipblasLtMatrixLayoutSetAttribute(C, LAYOUT_LD, wide, sizeof wide);
    }
    if (!strcmp(variant, "scale")) {
        const void *scale = buffer + 128;
        hipblasLtMatmulDescSetAttribute(desc, DESC_A_SCALE_POINTER, &scale, sizeof scale);
    }
    hipblasLtMatmulPreferenceCreate(&pref);
    uint64_t ws = ws_bytes;
    hipblasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE_BYTES, &ws, 8);
    Result r;
    int returned = 0;
    int st = hipblasLtMatmulAlgoGetHeuristic(handle, desc, A, B, C, C, pref, 1, &r, &returned);
    if (st == 0 && returned == 1) {
        static int calls;
        float alpha = 1, beta = !strcmp(variant, "betaalt") ? (float)(calls++ % 2) : 0;
        char *d = buffer + (!strcmp(variant, "cd") ? 16384 : 8192);
        st = hipblasLtMatmul(handle, desc, &alpha, buffer + (misalign ? 2 : 0), A, buffer + 4096,
                             B, &beta, buffer + 8192, C, d, C, &r.algo,
                             ws_bytes ? buffer + 65536 : NULL, ws_bytes, NULL);
    }
    hipblasLtMatmulPreferenceDestroy(pref);
    hipblasLtMatrixLayoutDestroy(A);
    hipblasLtMatrixLayoutDestroy(B);
    hipblasLtMatrixLayoutDestroy(C);
    hipblasLtMatmulDescDestroy(desc);
    return st;
}

/* Makes this module's handle, and no call: 0 if it could. */
int hiplt_make_handle(int unused) {
    (void)unused;
    return handle || hipblasLtCreate(&handle) == 0 ? 0 : 1;
}

/* R handles made and destroyed (each at a new address where the stand-in keeps destroyed
 * objects), then one F.linear 64,8,64 on a handle made last: 1 if it failed (as it does
 * when the call goes to another build than its objects'), else 0. */
int hiplt_handles(int rounds) {
    for (int i = 0; i < rounds; i++) {
        void *h = NULL;
        if (hipblasLtCreate(&h) != 0) return 1;
        hipblasLtDestroy(h);
    }
    void *saved = handle, *fresh = NULL;
    if (hipblasLtCreate(&fresh) != 0) return 1;
    handle = fresh;
    int st = hiplt_linear(64, 8, 64, 0, 0);
    handle = saved;
    hipblasLtDestroy(fresh);
    return st != 0;
}

/* 96 call sites of hipblasLtMatrixLayoutCreate (each its own return address: the sizes
 * differ, so no two calls merge), R rounds: each layout is checked to be this module's own
 * build's (the stand-in's fakehiplt_owns) and destroyed. Returns how many were not. */
int fakehiplt_owns(void *layout);
#define SITE(i)                                                                              \
    case i:                                                                                  \
        st = hipblasLtMatrixLayoutCreate(&l, R_16BF, 8 + i, 8, 8 + i);                      \
        break;
#define SITES8(b) SITE(b) SITE(b + 1) SITE(b + 2) SITE(b + 3) SITE(b + 4) SITE(b + 5) SITE(b + 6) SITE(b + 7)
int hiplt_sites(int rounds) {
    int foreign = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 96; i++) {
            void *l = NULL;
            int st = -1;
            switch (i) {
                SITES8(0) SITES8(8) SITES8(16) SITES8(24) SITES8(32) SITES8(40)
                SITES8(48) SITES8(56) SITES8(64) SITES8(72) SITES8(80) SITES8(88)
            }
            if (st != 0 || !fakehiplt_owns(l)) foreign++;
            if (l) hipblasLtMatrixLayoutDestroy(l);
        }
    }
    return foreign;
}
#else
#define HOST_NAME "hiplt_host"
#define MODULE_ENTRY "hiplt_linear"
#define SERVING_ENTRY "tunedblas_hipblaslt_serving"
#define MATMUL_ENTRY "hipblasLtMatmul"
#define MISS_TAG "-hipblaslt"
#include "linear_host.h"
#endif
