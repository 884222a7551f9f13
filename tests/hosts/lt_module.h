/* The Lt entry points the F.linear test modules (lt_host.c with -DLT_MODULE, hiplt_host.c
 * with -DHIPLT_MODULE) call, declared once: hipBLASLt's API is cuBLASLt's under another
 * prefix. The includer first defines LT(name) as its library's name of `name` (LT(Matmul):
 * cublasLtMatmul or hipblasLtMatmul) and its library's Algo type (the two libraries'
 * algorithm structs differ), then includes this. Both pass data types as a 32-bit C enum. */
#ifndef LT_MODULE_H
#define LT_MODULE_H

#include <stddef.h>
#include <stdint.h>

typedef struct { Algo algo; size_t workspace; int32_t state; float waves; int32_t reserved[4]; } Result;
int LT(Create)(void **h);
int LT(Destroy)(void *h);
int LT(MatmulDescCreate)(void **d, int32_t compute, int32_t scale);
int LT(MatmulDescDestroy)(void *d);
int LT(MatmulDescSetAttribute)(void *d, int attr, const void *buf, size_t size);
int LT(MatrixLayoutCreate)(void **l, int32_t type, uint64_t rows, uint64_t cols, int64_t ld);
int LT(MatrixLayoutDestroy)(void *l);
int LT(MatrixLayoutSetAttribute)(void *l, int attr, const void *buf, size_t size);
int LT(MatmulPreferenceCreate)(void **p);
int LT(MatmulPreferenceDestroy)(void *p);
int LT(MatmulPreferenceSetAttribute)(void *p, int attr, const void *buf, size_t size);
int LT(MatmulAlgoGetHeuristic)(void *h, void *d, void *A, void *B, void *C, void *D, void *p,
                               int requested, Result *out, int *returned);
int LT(Matmul)(void *h, void *desc, const void *alpha, const void *A, void *Ad, const void *B,
               void *Bd, const void *beta, const void *C, void *Cd, void *D, void *Dd,
               const Algo *algo, void *ws, size_t ws_bytes, void *stream);

#endif
