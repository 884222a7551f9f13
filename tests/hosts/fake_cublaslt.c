#include <pthread.h>
/* A stand-in for libcublasLt.so for the CPU tests: the C ABI of the cuBLASLt functions
 * tunedblas and its test host use (values from cublasLt.h), with descriptors that store
 * what they are given and a cublasLtMatmul that computes nothing but appends one line per
 * call to $FAKELT_TRACE saying which algorithm it ran:
 *   matmul m=.. n=.. k=.. algo=heuristic|<id> tile=.. stages=.. splitk=.. cluster=.. ok=0|1
 * (with FAKELT_TRACE_GETTERS=1, ending in getters=<descriptor and layout GetAttribute calls
 * since the last matmul>)
 * Rules the tests rely on: AlgoInit refuses ids outside 0..99; AlgoCheck refuses tile 999;
 * cublasLtMatmul refuses tile 998 (an algorithm that checks but fails to run); split-K > 1
 * needs 4096 bytes of workspace; any algorithm but the heuristic's (id 6) needs 16-byte
 * aligned pointers.
 * FAKELT_KEEP_DESTROYED=1: a destroyed descriptor or layout is not freed but marked dead,
 * its first 8 bytes overwritten as an allocator's free list overwrites freed memory (a
 * destroyed descriptor's compute and scale types then read back as garbage), and
 * cublasLtMatmul refuses a dead one (INVALID): what a matmul racing the destroy of its
 * descriptor (a caller's bug) meets, without touching freed memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env_once.h"
#include "fake_lt.h"

#define OK 0
#define INVALID 7
#define UNSUPPORTED 15

typedef struct {
    int32_t compute, scale, pointer_mode, transa, transb;
    uint32_t epilogue;
    int32_t sm_count, bias_type;
    int32_t dead;
} Desc;
typedef struct {
    uint32_t type;
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
    int32_t dead;
} Layout;

/* FAKELT_KEEP_DESTROYED: kill an object instead of freeing it (true if it did). */
static int kept_dead(void *object, int32_t *dead) {
    const char *k = ENV_ONCE("FAKELT_KEEP_DESTROYED");
    if (!object || !k || k[0] != '1') return 0;
    static const uint64_t free_list_word = 0x00007f125d3c2b1aull; /* a mangled pointer */
    memcpy(object, &free_list_word, 8);
    *dead = 1;
    return 1;
}
typedef struct { uint64_t data[8]; } Algo;
typedef struct {
    Algo algo;
    size_t workspace;
    int32_t state;
    float waves;
    int32_t reserved[4];
} Result;
typedef struct { uint64_t max_ws; } Pref;

static int copy_out(const void *field, size_t want, void *buf, size_t size, size_t *written) {
    return fake_lt_copy_out(field, want, buf, size, written) ? INVALID : OK;
}
static int copy_in(void *field, size_t want, const void *buf, size_t size) {
    return fake_lt_copy_in(field, want, buf, size, 1) ? INVALID : OK;
}

int cublasLtCreate(void **h) { *h = malloc(16); return OK; }
int cublasLtDestroy(void *h) { free(h); return OK; }
size_t cublasLtGetVersion(void) { return 130100; }

int cublasLtMatmulDescCreate(Desc **d, int32_t compute, int32_t scale) {
    Desc *x = calloc(1, sizeof *x);
    x->compute = compute;
    x->scale = scale;
    x->epilogue = 1;
    x->bias_type = -1;
    *d = x;
    return OK;
}
int cublasLtMatmulDescDestroy(Desc *d) {
    if (!kept_dead(d, d ? &d->dead : NULL)) free(d);
    return OK;
}
static void *desc_field(void *object, int attr, size_t *want) {
    Desc *d = object;
    *want = 4;
    switch (attr) {
    case 0: return &d->compute;
    case 1: return &d->scale;
    case 2: return &d->pointer_mode;
    case 3: return &d->transa;
    case 4: return &d->transb;
    case 7: return &d->epilogue;
    case 15: return &d->sm_count;
    case 26: return &d->bias_type;
    default: return NULL;
    }
}
int cublasLtMatmulDescSetAttribute(Desc *d, int attr, const void *buf, size_t size) {
    return fake_lt_set(desc_field, d, attr, buf, size, 1) ? INVALID : OK;
}
/* Descriptor and layout attribute reads since the last matmul (one counter for the process,
 * read by single-threaded tests; a relaxed atomic add, so a count costs one instruction and
 * the instruction counts of bench/lt/instructions.sh barely move). */
static int getters;

int cublasLtMatmulDescGetAttribute(Desc *d, int attr, void *buf, size_t size, size_t *written) {
    __atomic_fetch_add(&getters, 1, __ATOMIC_RELAXED);
    return fake_lt_get(desc_field, d, attr, buf, size, written) ? INVALID : OK;
}

int cublasLtMatrixLayoutCreate(Layout **l, uint32_t type, uint64_t rows, uint64_t cols, int64_t ld) {
    Layout *x = calloc(1, sizeof *x);
    x->type = type;
    x->rows = rows;
    x->cols = cols;
    x->ld = ld;
    x->batch = 1;
    *l = x;
    return OK;
}
int cublasLtMatrixLayoutDestroy(Layout *l) {
    if (!kept_dead(l, l ? &l->dead : NULL)) free(l);
    return OK;
}
static void *layout_field(void *object, int attr, size_t *want) {
    Layout *l = object;
    switch (attr) {
    case 0: *want = 4; return &l->type;
    case 1: *want = 4; return &l->order;
    case 2: *want = 8; return &l->rows;
    case 3: *want = 8; return &l->cols;
    case 4: *want = 8; return &l->ld;
    case 5: *want = 4; return &l->batch;
    case 6: *want = 8; return &l->stride;
    default: return NULL;
    }
}
int cublasLtMatrixLayoutSetAttribute(Layout *l, int attr, const void *buf, size_t size) {
    return fake_lt_set(layout_field, l, attr, buf, size, 1) ? INVALID : OK;
}
int cublasLtMatrixLayoutGetAttribute(Layout *l, int attr, void *buf, size_t size, size_t *written) {
    __atomic_fetch_add(&getters, 1, __ATOMIC_RELAXED);
    return fake_lt_get(layout_field, l, attr, buf, size, written) ? INVALID : OK;
}

int cublasLtMatmulPreferenceCreate(Pref **p) { *p = calloc(1, sizeof **p); return OK; }
int cublasLtMatmulPreferenceDestroy(Pref *p) { free(p); return OK; }
int cublasLtMatmulPreferenceSetAttribute(Pref *p, int attr, const void *buf, size_t size) {
    if (attr == 1) return copy_in(&p->max_ws, 8, buf, size);
    return (attr >= 5 && attr <= 8 && size == 4) ? OK : INVALID;
}

/* Algo words: 0 id, 1 tile, 2 split-K, 3 reduction, 4 swizzle, 5 custom, 6 stages,
 * 7 inner (low 16 bits) and cluster (next 16). */
static int config_slot(int attr, size_t *want, int *shift) {
    *shift = 0;
    *want = 4;
    if (attr >= 0 && attr <= 6) return attr;
    *want = 2;
    if (attr == 7) return 7;
    if (attr == 8) { *shift = 16; return 7; }
    return -1;
}
int cublasLtMatmulAlgoConfigGetAttribute(const Algo *a, int attr, void *buf, size_t size, size_t *written) {
    size_t want;
    int shift;
    int slot = config_slot(attr, &want, &shift);
    if (slot < 0) return INVALID;
    uint64_t v = (a->data[slot] >> shift) & (want == 2 ? 0xffff : 0xffffffff);
    return copy_out(&v, want, buf, size, written); /* little-endian: the low bytes */
}
int cublasLtMatmulAlgoConfigSetAttribute(Algo *a, int attr, const void *buf, size_t size) {
    size_t want;
    int shift;
    int slot = config_slot(attr, &want, &shift);
    if (slot <= 0) return INVALID; /* unknown, or the read-only id */
    uint64_t v = 0;
    if (copy_in(&v, want, buf, size) != OK) return INVALID;
    uint64_t mask = (want == 2 ? 0xffffull : 0xffffffffull) << shift;
    a->data[slot] = (a->data[slot] & ~mask) | (v << shift);
    return OK;
}
/* What the wider search (tunedblas-lt --budget) reads: AlgoGetIds lists ids 6, 21, 66 and
 * 120 (AlgoInit refuses 120); id 66 has tiles 15, 20 and 999 (AlgoCheck refuses 999),
 * stages 8 and 35, split-K with reduction schemes 1 and 2, swizzling and custom options
 * 0..2; the others tile 15, stage 8 and none of that. */
int cublasLtMatmulAlgoGetIds(void *h, int32_t compute, int32_t scale, uint32_t at, uint32_t bt,
                             uint32_t ct, uint32_t dt, int requested, int *ids, int *returned) {
    (void)h; (void)compute; (void)scale; (void)at; (void)bt; (void)ct; (void)dt;
    static const int all[] = {6, 21, 66, 120};
    if (requested < 0 || !ids || !returned) return INVALID;
    int n = 0;
    for (; n < requested && n < 4; n++) ids[n] = all[n];
    *returned = n;
    return OK;
}
int cublasLtMatmulAlgoCapGetAttribute(const Algo *a, int attr, void *buf, size_t size, size_t *written) {
    static const uint32_t tiles66[] = {15, 20, 999}, tiles[] = {15}, stages66[] = {8, 35}, stages[] = {8};
    int big = a->data[0] == 66;
    uint32_t align = 16;
    int32_t v;
    if (attr >= 16 && attr <= 19) return copy_out(&align, 4, buf, size, written);
    switch (attr) {
    case 0: case 2: v = big; return copy_out(&v, 4, buf, size, written);
    case 1: v = big ? 3 : 0; return copy_out(&v, 4, buf, size, written);
    case 7: v = big ? 2 : 0; return copy_out(&v, 4, buf, size, written);
    case 6: return big ? copy_out(tiles66, sizeof tiles66, buf, size, written)
                       : copy_out(tiles, sizeof tiles, buf, size, written);
    case 13: return big ? copy_out(stages66, sizeof stages66, buf, size, written)
                        : copy_out(stages, sizeof stages, buf, size, written);
    default: return INVALID;
    }
}
int cublasLtMatmulAlgoInit(void *h, int32_t compute, int32_t scale, uint32_t at, uint32_t bt,
                           uint32_t ct, uint32_t dt, int id, Algo *a) {
    (void)h; (void)compute; (void)scale; (void)at; (void)bt; (void)ct; (void)dt;
    if (id < 0 || id >= 100) return UNSUPPORTED;
    memset(a, 0, sizeof *a);
    a->data[0] = (uint32_t)id;
    a->data[2] = 1;
    return OK;
}
static size_t workspace_of(const Algo *a) { return a->data[2] > 1 ? 4096 : 0; }
int cublasLtMatmulAlgoCheck(void *h, Desc *d, Layout *A, Layout *B, Layout *C, Layout *D,
                            const Algo *a, Result *r) {
    (void)h; (void)d; (void)A; (void)B; (void)C; (void)D;
    if (a->data[1] == 999) return UNSUPPORTED;
    memset(r, 0, sizeof *r);
    r->workspace = workspace_of(a);
    return OK;
}
/* The heuristic's only answer: algo 6, tile 15, stages 8. */
int cublasLtMatmulAlgoGetHeuristic(void *h, Desc *d, Layout *A, Layout *B, Layout *C, Layout *D,
                                   Pref *p, int requested, Result *out, int *returned) {
    (void)h; (void)d; (void)A; (void)B; (void)C; (void)D; (void)p;
    if (requested < 1) return INVALID;
    memset(out, 0, sizeof *out);
    cublasLtMatmulAlgoInit(h, 0, 0, 0, 0, 0, 0, 6, &out->algo);
    out->algo.data[1] = 15;
    out->algo.data[6] = 8;
    *returned = 1;
    return OK;
}

/* Which build of the stand-in this is (-DFAKE_BUILD=2 makes a second one, another file with
 * another sha256): the trace says which build ran a call. */
#ifndef FAKE_BUILD
#define FAKE_BUILD 1
#endif

/* D = alpha op(A) op(B) + beta C, column-major, for unbatched problems (fake_lt.h). */
static void compute_d(Desc *desc, const void *alpha, const void *A, Layout *Ad, const void *B, Layout *Bd,
                      const void *beta, const void *C, Layout *Cd, void *D, Layout *Dd) {
    if (Dd->batch > 1) return;
    FakeLtMatrix a = {A, Ad->type, Ad->ld, desc->transa != 0}, b = {B, Bd->type, Bd->ld, desc->transb != 0},
                 c = {C, Cd->type, Cd->ld, 0};
    fake_lt_gemm(Dd->rows, Dd->cols, desc->transa ? Ad->rows : Ad->cols, *(const float *)alpha, a, b,
                 *(const float *)beta, c, D, Dd->type, Dd->ld);
}

int cublasLtMatmul(void *h, Desc *desc, const void *alpha, const void *A, Layout *Ad,
                   const void *B, Layout *Bd, const void *beta, const void *C, Layout *Cd,
                   void *D, Layout *Dd, const Algo *algo, void *ws, size_t ws_bytes, void *stream) {
    (void)h; (void)desc; (void)alpha; (void)beta; (void)Bd; (void)Cd; (void)stream;
    /* FAKELT_CANCEL_POINT=1: a cancellation point inside the library, as cuBLASLt's waits. */
    const char *cancel = ENV_ONCE("FAKELT_CANCEL_POINT");
    if (cancel && cancel[0] == '1') pthread_testcancel();
    if ((desc && desc->dead) || (Ad && Ad->dead) || (Bd && Bd->dead) || (Cd && Cd->dead) || (Dd && Dd->dead))
        return INVALID;
    int ok = 1;
    if (algo && (algo->data[1] == 998 || workspace_of(algo) > ws_bytes || (workspace_of(algo) && !ws)))
        ok = 0;
    /* Only the heuristic's own algorithm (id 6) copes with pointers below 16-byte alignment. */
    if (algo && algo->data[0] != 6 && (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)D) & 15) != 0) ok = 0;
    /* FAKELT_COMPUTE=1: compute D for real (unbatched problems of at most 2^24
     * multiply-adds; larger ones are left alone), for `tunedblas lt tune` on the stand-in
     * runtime; FAKELT_DIE_COLS=N: the process dies in a matmul whose D has N columns. */
    const char *die = ENV_ONCE("FAKELT_DIE_COLS");
    if (ok && Dd && die && (uint64_t)atoll(die) == Dd->cols) _exit(9);
    const char *compute = ENV_ONCE("FAKELT_COMPUTE");
    if (ok && compute && compute[0] == '1' && Ad && Dd) {
        /* FAKELT_SLOW_HEURISTIC=1: the heuristic's algorithm (id 6) takes 4 times as long. */
        const char *slow = ENV_ONCE("FAKELT_SLOW_HEURISTIC");
        int reps = slow && slow[0] == '1' && (!algo || algo->data[0] == 6) ? 4 : 1;
        for (int r = 0; r < reps; r++) compute_d(desc, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd);
    }
    const char *path = ENV_ONCE("FAKELT_TRACE");
    int reads = __atomic_exchange_n(&getters, 0, __ATOMIC_RELAXED);
    if (path) {
        const char *say = ENV_ONCE("FAKELT_TRACE_GETTERS");
        FILE *f = fopen(path, "a");
        if (f) {
            uint64_t k = Ad ? (desc->transa ? Ad->rows : Ad->cols) : 0;
            if (algo)
                fprintf(f, "matmul m=%llu n=%llu k=%llu algo=%llu tile=%llu stages=%llu splitk=%llu cluster=%llu ok=%d build=%d",
                        (unsigned long long)Dd->rows, (unsigned long long)Dd->cols, (unsigned long long)k,
                        (unsigned long long)algo->data[0], (unsigned long long)algo->data[1],
                        (unsigned long long)algo->data[6], (unsigned long long)algo->data[2],
                        (unsigned long long)((algo->data[7] >> 16) & 0xffff), ok, FAKE_BUILD);
            else
                fprintf(f, "matmul m=%llu n=%llu k=%llu algo=heuristic ok=%d build=%d",
                        (unsigned long long)Dd->rows, (unsigned long long)Dd->cols, (unsigned long long)k, ok,
                        FAKE_BUILD);
            if (say && say[0] == '1') fprintf(f, " getters=%d", reads);
            fprintf(f, "\n");
            fclose(f);
        }
    }
    return ok ? OK : UNSUPPORTED;
}
