/* A stand-in for libhipblaslt.so.1 for the CPU tests, as fake_cublaslt.c is for cuBLASLt:
 * the C ABI of the hipBLASLt functions tunedblas and its test host use (values from
 * hipblaslt.h and hipblas-common.h), and the four C++ functions of `hipblaslt_ext` that
 * PyTorch's TunableOp uses, declared with the real header's types so that g++ gives them the
 * real mangled names (src/abi.rs HIPBLASLT_EXT_*), built against the real libstdc++ whose
 * std::vector they fill. Descriptors store what they are given; hipblasLtMatmul computes
 * nothing but appends one line per call to $FAKEHIPLT_TRACE (one write(2), O_APPEND):
 *   matmul m=<D rows> n=<D cols> k=.. algo=heuristic|<index> ok=0|1
 * (algo=heuristic: called with no algo; algo=-1: with an algo that is not one of ours);
 * with FAKEHIPLT_TRACE_GETTERS=1, each line ends in getters=<descriptor and layout
 * GetAttribute calls since the last matmul>.
 *
 * Algorithms: data[0..4] is the index (little-endian int32), data[4..8] the magic 0x484c5441
 * that tells ours from garbage, data[8..16] zero; max_workspace_bytes is the workspace the
 * index needs. Rules the tests rely on:
 * - valid indices are 0..=999; indices >= 500 need 4096 bytes of workspace, the others none;
 * - hipblasLtMatmulAlgoGetHeuristic gives one answer: index 6, workspaceSize 0;
 * - getAllAlgos lists indices 0..=9, 500, 998 and 999 in that order, whatever the types;
 * - getAlgosFromIndex clears its output and push_backs one result per valid index asked
 *   for, skipping invalid ones (as hipBLASLt does); it succeeds even when none is valid;
 * - getAlgosFromIndex throws std::out_of_range for an index from 1000 to 1999 (an exception
 *   leaving hipblaslt_ext, which Rust could not catch);
 * - getIndexFromAlgo is the index, -1 for an algo whose magic is wrong;
 * - matmulIsAlgoSupported refuses index 999 (NOT_SUPPORTED; hipblasLtMatmul would run it) and
 *   an algo whose magic is wrong or whose index is out of range (INVALID_VALUE); else it
 *   writes the workspace the index needs;
 * - hipblasLtMatmul refuses with INVALID_VALUE an algo not ours, one needing more workspace
 *   than given or given a NULL workspace when it needs one, and any algo but index 6 with
 *   A, B, C or D not 16-byte aligned; it refuses index 998 with EXECUTION_FAILED (it checks
 *   fine but fails to run). With no algo it runs its own heuristic's;
 * - hipblasLtMatmul, the heuristic and matmulIsAlgoSupported refuse (INVALID_VALUE) layouts
 *   whose sizes do not agree with the transposes: D is m x n, op(A) m x k, op(B) k x n, C
 *   m x n (and TRANSA/TRANSB must be OP_N, OP_T or OP_C);
 * - as in hipBLASLt, the compute and scale types given to hipblasLtMatmulDescCreate cannot
 *   be read back: GetAttribute knows TRANSA, TRANSB, EPILOGUE, BIAS_POINTER, BIAS_DATA_TYPE,
 *   A_SCALE_POINTER and POINTER_MODE only (any other is INVALID_VALUE); and hipblasLtMatrixLayoutGetAttribute
 *   reads back the batch count and stride only (hipBLASLt 7.1.1 answers INVALID_VALUE for
 *   the type, order, rows, cols and leading dimension);
 * - a NULL handle is NOT_INITIALIZED; hipblasLtCreate asks the HIP runtime for the device
 *   (hipGetDevice, fake_hip.c) and fails with NOT_INITIALIZED when that fails;
 * - hipblasLtGetVersion says 100100 (hipBLASLt 1.1.0); hipblasLtGetGitRevision says "5ca1ab1e"
 *   (as hipBLASLt, both only check that the handle is not NULL).
 * FAKEHIPLT_COMPUTE=1 / FAKEHIPLT_SLOW_HEURISTIC=1 / FAKEHIPLT_WRONG_INDEX=N:
 * hipblasLtMatmul computes D (small unbatched bf16/f32 problems), the heuristic's index 4
 * times over, index N wrongly (for the tuner's tests).
 * FAKEHIPLT_CANCEL_POINT=1: a pthread_testcancel() inside hipblasLtMatmul, as hipBLASLt's
 * waits; there is no other cancellation point (the trace is written with it disabled).
 * FAKEHIPLT_KEEP_DESTROYED=1: destroyed handles, descriptors and layouts are not freed but
 * marked dead (every call refuses a dead descriptor or layout with INVALID_VALUE, as another
 * build's), so no address is handed out twice, as in a long-running process whose allocator
 * hands out ever new addresses, and a use after destroy (a caller's race) fails cleanly.
 * FAKEHIPLT_FAIL_ONCE=call|check: the first hipblasLtMatmul given an algorithm other than the
 * heuristic's (call), or the first matmulIsAlgoSupported (check), fails with INVALID_VALUE,
 * as one whose descriptor another thread destroys meanwhile does; later ones are as usual.
 * FAKEHIPLT_FAIL_BOTH=N: the first N hipblasLtMatmul calls given an algorithm other than the
 * heuristic's fail with INVALID_VALUE, and so does the call right after each (the caller's
 * own algorithm, with the same destroyed descriptor). */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <stdexcept>
#include <vector>

#include "env_once.h"
#include "fake_lt.h"

// ---- The real headers' types under their names: the mangled names are made of them ------
// A typedef of an anonymous enum or struct is mangled by the typedef's name, a named one by
// its tag; hipDataType is both (library_types.h), the heuristic result and the algo go by
// their tags (`_hipblasLtMatmulAlgo_t`), the opaque descriptors by their typedefs.
typedef enum {
    HIPBLAS_STATUS_SUCCESS = 0,
    HIPBLAS_STATUS_NOT_INITIALIZED = 1,
    HIPBLAS_STATUS_ALLOC_FAILED = 2,
    HIPBLAS_STATUS_INVALID_VALUE = 3,
    HIPBLAS_STATUS_EXECUTION_FAILED = 5,
    HIPBLAS_STATUS_INTERNAL_ERROR = 6,
    HIPBLAS_STATUS_NOT_SUPPORTED = 7,
} hipblasStatus_t;
typedef enum { HIPBLAS_OP_N = 111, HIPBLAS_OP_T = 112, HIPBLAS_OP_C = 113 } hipblasOperation_t;
typedef enum hipDataType { HIP_R_32F = 0, HIP_R_64F = 1, HIP_R_16F = 2, HIP_R_16BF = 14 } hipDataType;
typedef enum {
    HIPBLAS_COMPUTE_16F = 0, HIPBLAS_COMPUTE_16F_PEDANTIC = 1, HIPBLAS_COMPUTE_32F = 2, HIPBLAS_COMPUTE_32F_PEDANTIC = 3,
    HIPBLAS_COMPUTE_32F_FAST_16F = 4, HIPBLAS_COMPUTE_32F_FAST_16BF = 5, HIPBLAS_COMPUTE_32F_FAST_TF32 = 6,
    HIPBLAS_COMPUTE_64F = 7, HIPBLAS_COMPUTE_64F_PEDANTIC = 8, HIPBLAS_COMPUTE_32I = 9, HIPBLAS_COMPUTE_32I_PEDANTIC = 10,
} hipblasComputeType_t;
typedef void *hipblasLtHandle_t;
typedef struct _hipblasLtMatmulAlgo_t {
    uint8_t data[16];
    size_t max_workspace_bytes;
} hipblasLtMatmulAlgo_t;
typedef struct _hipblasLtMatmulHeuristicResult_t {
    hipblasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    hipblasStatus_t state;
    float wavesCount;
    int reserved[4];
} hipblasLtMatmulHeuristicResult_t;
typedef struct { uint64_t data[4]; } hipblasLtMatmulDescOpaque_t;
typedef hipblasLtMatmulDescOpaque_t *hipblasLtMatmulDesc_t;
typedef struct { uint64_t data[4]; } hipblasLtMatrixLayoutOpaque_t;
typedef hipblasLtMatrixLayoutOpaque_t *hipblasLtMatrixLayout_t;

static_assert(sizeof(hipblasLtMatmulAlgo_t) == 24, "src/abi.rs HipblasLtMatmulAlgo");
static_assert(sizeof(hipblasLtMatmulHeuristicResult_t) == 56, "src/abi.rs HipblasLtMatmulHeuristicResult");

extern "C" int hipGetDevice(int *device);

// ---- What the descriptors are here (callers see opaque pointers) -------------------------
struct Handle {
    int device;
};
/* Built with -DFAKE_BUILD=2 as a second build (another file, another sha256): its objects
 * carry the build, hipblasLtMatmul refuses (INVALID_VALUE) a descriptor or layout another
 * build made (in hipBLASLt that would be another library's heap), and its trace lines end
 * with build=2. */
#ifndef FAKE_BUILD
#define FAKE_BUILD 1
#endif

struct Desc {
    hipblasComputeType_t compute; // given at create; no attribute reads it back
    hipDataType scale;            // likewise
    int32_t transa = HIPBLAS_OP_N, transb = HIPBLAS_OP_N;
    uint32_t epilogue = 1;
    void *bias = nullptr;
    int32_t bias_type = -1;
    int32_t pointer_mode = 0;
    const void *a_scale = nullptr;
    int build = FAKE_BUILD;
};
struct Layout {
    uint32_t type;
    int32_t order = 0;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1;
    int64_t stride = 0;
    int build = FAKE_BUILD;
};
struct Pref {
    uint64_t max_ws = 0;
};

static const uint32_t MAGIC = 0x484c5441;

/* FAKEHIPLT_KEEP_DESTROYED: a destroyed object stays, dead (build 0). */
static bool keep_destroyed() {
    const char *v = ENV_ONCE("FAKEHIPLT_KEEP_DESTROYED");
    return v && v[0] == '1';
}
/* FAKEHIPLT_FAIL_ONCE=what: true for the first caller asking for `what` only. */
static bool fail_once(const char *what) {
    static std::atomic<bool> call_done{false}, check_done{false};
    const char *v = ENV_ONCE("FAKEHIPLT_FAIL_ONCE");
    if (!v || strcmp(v, what) != 0) return false;
    return !(strcmp(what, "call") == 0 ? call_done : check_done).exchange(true);
}
/* FAKEHIPLT_FAIL_BOTH: whether this matmul (tuned: given another algorithm than the
 * heuristic's) fails. */
static bool fail_both(bool tuned) {
    static std::atomic<int> failed_tuned{0};
    static std::atomic<bool> next_fails{false};
    const char *v = ENV_ONCE("FAKEHIPLT_FAIL_BOTH");
    if (!v) return false;
    if (next_fails.exchange(false)) return true;
    if (tuned && failed_tuned.fetch_add(1) < atoi(v)) {
        next_fails = true;
        return true;
    }
    return false;
}
static const int HEURISTIC_INDEX = 6;

// ---- Attributes: cuBLASLt's size rules (size 0 asks for the size) -------------------------
/* Getters as cuBLASLt's; setters as hipBLASLt 7.1.1's: a buffer at least the attribute's size
 * is taken, its first bytes read (an int64_t batch count sets the count). fake_lt.h has both;
 * this is its status as hipBLASLt's. */
static hipblasStatus_t status(int fake) { return fake ? HIPBLAS_STATUS_INVALID_VALUE : HIPBLAS_STATUS_SUCCESS; }
/* Frees a descriptor or layout, or with FAKEHIPLT_KEEP_DESTROYED marks it dead (build 0). */
template <typename T> static hipblasStatus_t destroy(T *object) {
    if (object && keep_destroyed())
        object->build = 0;
    else
        delete object;
    return HIPBLAS_STATUS_SUCCESS;
}

extern "C" {

hipblasStatus_t hipblasLtCreate(Handle **h) {
    if (!h) return HIPBLAS_STATUS_INVALID_VALUE;
    int device;
    if (hipGetDevice(&device) != 0) return HIPBLAS_STATUS_NOT_INITIALIZED;
    *h = new (std::nothrow) Handle{device};
    return *h ? HIPBLAS_STATUS_SUCCESS : HIPBLAS_STATUS_ALLOC_FAILED;
}
hipblasStatus_t hipblasLtDestroy(Handle *h) {
    if (!h) return HIPBLAS_STATUS_NOT_INITIALIZED;
    if (keep_destroyed()) return HIPBLAS_STATUS_SUCCESS;
    delete h;
    return HIPBLAS_STATUS_SUCCESS;
}
/* hipBLASLt 1.1.0 (ROCm 7.1): major * 100000 + minor * 100 + patch. */
hipblasStatus_t hipblasLtGetVersion(Handle *h, int *version) {
    if (!h) return HIPBLAS_STATUS_NOT_INITIALIZED;
    if (!version) return HIPBLAS_STATUS_INVALID_VALUE;
    *version = 100100;
    return HIPBLAS_STATUS_SUCCESS;
}

/* The revision a tuning file's `Git Version:` line must name (hipblaslt.h: char rev[128]). */
hipblasStatus_t hipblasLtGetGitRevision(Handle *h, char *rev) {
    if (!h) return HIPBLAS_STATUS_NOT_INITIALIZED;
    if (!rev) return HIPBLAS_STATUS_INVALID_VALUE;
    strcpy(rev, "5ca1ab1e");
    return HIPBLAS_STATUS_SUCCESS;
}

hipblasStatus_t hipblasLtMatmulDescCreate(Desc **d, hipblasComputeType_t compute, hipDataType scale) {
    if (!d) return HIPBLAS_STATUS_INVALID_VALUE;
    *d = new (std::nothrow) Desc{compute, scale};
    return *d ? HIPBLAS_STATUS_SUCCESS : HIPBLAS_STATUS_ALLOC_FAILED;
}
hipblasStatus_t hipblasLtMatmulDescDestroy(Desc *d) { return destroy(d); }
static void *desc_field(void *object, int attr, size_t *want) {
    Desc *d = static_cast<Desc *>(object);
    *want = 4;
    switch (attr) {
    case 0: return &d->transa;
    case 1: return &d->transb;
    case 2: return &d->epilogue;
    case 3: *want = sizeof d->bias; return &d->bias;
    case 4: return &d->bias_type;
    case 5: *want = sizeof d->a_scale; return &d->a_scale;
    case 13: return &d->pointer_mode;
    default: return nullptr;
    }
}
hipblasStatus_t hipblasLtMatmulDescSetAttribute(Desc *d, int attr, const void *buf, size_t size) {
    return status(fake_lt_set(desc_field, d, attr, buf, size, 0));
}
/* Descriptor and layout attribute reads since the last matmul (one counter for the process,
 * read by single-threaded tests; a relaxed atomic add, so a count costs one instruction). */
static int getters;

hipblasStatus_t hipblasLtMatmulDescGetAttribute(Desc *d, int attr, void *buf, size_t size, size_t *written) {
    __atomic_fetch_add(&getters, 1, __ATOMIC_RELAXED);
    return status(fake_lt_get(desc_field, d, attr, buf, size, written));
}

hipblasStatus_t hipblasLtMatrixLayoutCreate(Layout **l, hipDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (!l) return HIPBLAS_STATUS_INVALID_VALUE;
    Layout *x = new (std::nothrow) Layout;
    if (!x) return HIPBLAS_STATUS_ALLOC_FAILED;
    x->type = (uint32_t)type;
    x->rows = rows;
    x->cols = cols;
    x->ld = ld;
    *l = x;
    return HIPBLAS_STATUS_SUCCESS;
}
/* For the tests: whether a layout was made by this build (1) or another (0). */
int fakehiplt_owns(const Layout *l) { return l && l->build == FAKE_BUILD; }
hipblasStatus_t hipblasLtMatrixLayoutDestroy(Layout *l) { return destroy(l); }
static void *layout_field(void *object, int attr, size_t *want) {
    Layout *l = static_cast<Layout *>(object);
    switch (attr) {
    case 0: *want = 4; return &l->batch;
    case 1: *want = 8; return &l->stride;
    case 2: *want = 4; return &l->type;
    case 3: *want = 4; return &l->order;
    case 4: *want = 8; return &l->rows;
    case 5: *want = 8; return &l->cols;
    case 6: *want = 8; return &l->ld;
    default: return nullptr;
    }
}
hipblasStatus_t hipblasLtMatrixLayoutSetAttribute(Layout *l, int attr, const void *buf, size_t size) {
    return status(fake_lt_set(layout_field, l, attr, buf, size, 0));
}
hipblasStatus_t hipblasLtMatrixLayoutGetAttribute(Layout *l, int attr, void *buf, size_t size, size_t *written) {
    __atomic_fetch_add(&getters, 1, __ATOMIC_RELAXED);
    /* As hipBLASLt 7.1.1 (measured, tests/conformance/hipblaslt.rs): only the batch count and
     * stride can be read back; type, order, rows, cols and ld are INVALID_VALUE. */
    return attr <= 1 ? status(fake_lt_get(layout_field, l, attr, buf, size, written)) : HIPBLAS_STATUS_INVALID_VALUE;
}

hipblasStatus_t hipblasLtMatmulPreferenceCreate(Pref **p) {
    if (!p) return HIPBLAS_STATUS_INVALID_VALUE;
    *p = new (std::nothrow) Pref;
    return *p ? HIPBLAS_STATUS_SUCCESS : HIPBLAS_STATUS_ALLOC_FAILED;
}
hipblasStatus_t hipblasLtMatmulPreferenceDestroy(Pref *p) {
    delete p;
    return HIPBLAS_STATUS_SUCCESS;
}
hipblasStatus_t hipblasLtMatmulPreferenceSetAttribute(Pref *p, int attr, const void *buf, size_t size) {
    if (!p || attr != 1 /* MAX_WORKSPACE_BYTES */) return HIPBLAS_STATUS_INVALID_VALUE;
    return status(fake_lt_copy_in(&p->max_ws, 8, buf, size, 0));
}

} // extern "C"

// ---- Algorithms and problems ---------------------------------------------------------------
/* The workspace an index needs. */
static size_t workspace_of(int index) { return index >= 500 ? 4096 : 0; }

/* The index an algo carries, and whether it is one of ours (its magic). */
static bool decode(const hipblasLtMatmulAlgo_t *a, int32_t *index) {
    uint32_t magic;
    memcpy(index, a->data, 4);
    memcpy(&magic, a->data + 4, 4);
    return magic == MAGIC;
}

/* The index of a valid algo of ours, else -1. */
static int index_of(const hipblasLtMatmulAlgo_t *a) {
    int32_t index;
    return decode(a, &index) && index >= 0 && index <= 999 ? index : -1;
}

static hipblasLtMatmulAlgo_t algo_of(int index) {
    hipblasLtMatmulAlgo_t a;
    memset(&a, 0, sizeof a);
    int32_t i = index;
    memcpy(a.data, &i, 4);
    memcpy(a.data + 4, &MAGIC, 4);
    a.max_workspace_bytes = workspace_of(index);
    return a;
}

static hipblasLtMatmulHeuristicResult_t result_of(int index) {
    hipblasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    r.algo = algo_of(index);
    r.workspaceSize = workspace_of(index);
    r.state = HIPBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    return r;
}

static bool is_op(int32_t op) { return op == HIPBLAS_OP_N || op == HIPBLAS_OP_T || op == HIPBLAS_OP_C; }

/* k of op(A). */
static uint64_t k_of(const Desc *d, const Layout *A) {
    return d && A ? (d->transa != HIPBLAS_OP_N ? A->rows : A->cols) : 0;
}

/* Whether the layouts agree with the transposes: D = op(A)[m,k] op(B)[k,n], C like D. */
static bool problem_agrees(const Desc *d, const Layout *A, const Layout *B, const Layout *C, const Layout *D) {
    if (!d || !A || !B || !C || !D || !is_op(d->transa) || !is_op(d->transb)) return false;
    if (d->build != FAKE_BUILD || A->build != FAKE_BUILD || B->build != FAKE_BUILD || C->build != FAKE_BUILD ||
        D->build != FAKE_BUILD)
        return false; /* another build's object */
    bool ta = d->transa != HIPBLAS_OP_N, tb = d->transb != HIPBLAS_OP_N;
    uint64_t m = D->rows, n = D->cols, k = k_of(d, A);
    return (ta ? A->cols : A->rows) == m && (tb ? B->cols : B->rows) == k && (tb ? B->rows : B->cols) == n &&
           C->rows == m && C->cols == n;
}

/* One trace line, in one write(2), with cancellation off so that it is whole and no
 * descriptor leaks. */
static void trace(const Layout *D, uint64_t k, const hipblasLtMatmulAlgo_t *algo, bool ok) {
    const char *path = ENV_ONCE("FAKEHIPLT_TRACE");
    if (!path) return;
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    char name[16], line[160];
    if (algo) snprintf(name, sizeof name, "%d", index_of(algo));
    else snprintf(name, sizeof name, "heuristic");
    char build[16] = "", reads[24] = "";
    if (FAKE_BUILD != 1) snprintf(build, sizeof build, " build=%d", FAKE_BUILD);
    const char *say = ENV_ONCE("FAKEHIPLT_TRACE_GETTERS");
    int count = __atomic_exchange_n(&getters, 0, __ATOMIC_RELAXED);
    if (say && say[0] == '1') snprintf(reads, sizeof reads, " getters=%d", count);
    int len = snprintf(line, sizeof line, "matmul m=%llu n=%llu k=%llu algo=%s ok=%d%s%s\n",
                       (unsigned long long)(D ? D->rows : 0), (unsigned long long)(D ? D->cols : 0),
                       (unsigned long long)k, name, ok ? 1 : 0, build, reads);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t written = write(fd, line, len); /* a short one shows in the tests' reading */
        (void)written;
        close(fd);
    }
    pthread_setcancelstate(old, nullptr);
}

/* D = alpha op(A) op(B) + beta C, column-major, for unbatched bf16/f32 problems of at most
 * 2^24 multiply-adds (fake_lt.h; others are left alone). */
static void compute_d(const Desc *desc, const void *alpha, const void *A, const Layout *Ad, const void *B,
                      const Layout *Bd, const void *beta, const void *C, const Layout *Cd, void *D, const Layout *Dd) {
    if (Dd->batch > 1) return;
    FakeLtMatrix a = {A, Ad->type, Ad->ld, desc->transa != HIPBLAS_OP_N},
                 b = {B, Bd->type, Bd->ld, desc->transb != HIPBLAS_OP_N}, c = {C, Cd->type, Cd->ld, 0};
    fake_lt_gemm(Dd->rows, Dd->cols, k_of(desc, Ad), *(const float *)alpha, a, b, *(const float *)beta, c, D,
                 Dd->type, Dd->ld);
}

extern "C" {

hipblasStatus_t hipblasLtMatmulAlgoGetHeuristic(Handle *h, Desc *d, Layout *A, Layout *B, Layout *C, Layout *D,
                                                Pref *p, int requested, hipblasLtMatmulHeuristicResult_t *out,
                                                int *returned) {
    if (!h) return HIPBLAS_STATUS_NOT_INITIALIZED;
    if (!p || requested < 1 || !out || !returned || !problem_agrees(d, A, B, C, D))
        return HIPBLAS_STATUS_INVALID_VALUE;
    out[0] = result_of(HEURISTIC_INDEX);
    *returned = 1;
    return HIPBLAS_STATUS_SUCCESS;
}

/* What a matmul that passed its checks does: compute (with FAKEHIPLT_COMPUTE) and trace. */
static void execute(int index, Desc *desc, const void *alpha, const void *A, Layout *Ad, const void *B, Layout *Bd,
                    const void *beta, const void *C, Layout *Cd, void *D, Layout *Dd,
                    const hipblasLtMatmulAlgo_t *algo, bool ok);

/* A matmul recorded on a capturing stream (fake_hip.c): its arguments, scalars copied. */
struct Captured {
    int index;
    Desc *desc;
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
    Layout *Ad, *Bd, *Cd, *Dd;
    hipblasLtMatmulAlgo_t algo;
    bool has_algo;
};
static void run_captured(void *p) {
    Captured *c = static_cast<Captured *>(p);
    execute(c->index, c->desc, &c->alpha, c->A, c->Ad, c->B, c->Bd, &c->beta, c->C, c->Cd, c->D, c->Dd,
            c->has_algo ? &c->algo : nullptr, true);
}
static void release_captured(void *p) { delete static_cast<Captured *>(p); }
extern "C" int fakehip_capture(void *stream, void (*run)(void *), void (*release)(void *), void *arg);

hipblasStatus_t hipblasLtMatmul(Handle *h, Desc *desc, const void *alpha, const void *A, Layout *Ad, const void *B,
                                Layout *Bd, const void *beta, const void *C, Layout *Cd, void *D, Layout *Dd,
                                const hipblasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, void *stream) {
    const char *cancel = ENV_ONCE("FAKEHIPLT_CANCEL_POINT");
    if (cancel && cancel[0] == '1') pthread_testcancel();
    int index = algo ? index_of(algo) : HEURISTIC_INDEX;
    bool misaligned = (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)D) & 15) != 0;
    hipblasStatus_t st = HIPBLAS_STATUS_SUCCESS;
    if (!h)
        st = HIPBLAS_STATUS_NOT_INITIALIZED;
    else if (!alpha || !beta || !problem_agrees(desc, Ad, Bd, Cd, Dd) || index < 0 ||
             workspace_of(index) > ws_bytes || (workspace_of(index) && !ws))
        st = HIPBLAS_STATUS_INVALID_VALUE;
    /* Only the heuristic's own algorithm copes with pointers below 16-byte alignment. */
    else if (index != HEURISTIC_INDEX && misaligned)
        st = HIPBLAS_STATUS_INVALID_VALUE;
    else if (index == 998)
        st = HIPBLAS_STATUS_EXECUTION_FAILED;
    else if (index != HEURISTIC_INDEX && fail_once("call"))
        st = HIPBLAS_STATUS_INVALID_VALUE;
    else if (fail_both(index != HEURISTIC_INDEX))
        st = HIPBLAS_STATUS_INVALID_VALUE;
    if (st == HIPBLAS_STATUS_SUCCESS && stream) {
        /* A checked call on a capturing stream runs when the graph is launched. */
        Captured *c = new (std::nothrow) Captured{index, desc, *(const float *)alpha, *(const float *)beta, A, B, C,
                                                  D, Ad, Bd, Cd, Dd, algo ? *algo : hipblasLtMatmulAlgo_t{}, algo != nullptr};
        if (c && fakehip_capture(stream, run_captured, release_captured, c)) return st;
        delete c;
    }
    execute(index, desc, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, st == HIPBLAS_STATUS_SUCCESS);
    return st;
}

static void execute(int index, Desc *desc, const void *alpha, const void *A, Layout *Ad, const void *B, Layout *Bd,
                    const void *beta, const void *C, Layout *Cd, void *D, Layout *Dd,
                    const hipblasLtMatmulAlgo_t *algo, bool ok) {
    /* FAKEHIPLT_COMPUTE=1: compute D for real (see compute_d), for `tunedblas lt tune` on
     * the stand-in runtime; FAKEHIPLT_SLOW_HEURISTIC=1: the heuristic's index (6) computes it
     * 4 times, so it takes 4 times as long. */
    const char *compute = ENV_ONCE("FAKEHIPLT_COMPUTE");
    if (ok && compute && compute[0] == '1') {
        const char *slow = ENV_ONCE("FAKEHIPLT_SLOW_HEURISTIC");
        int reps = slow && slow[0] == '1' && index == HEURISTIC_INDEX ? 4 : 1;
        for (int r = 0; r < reps; r++) compute_d(desc, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd);
        /* FAKEHIPLT_WRONG_INDEX=N: index N computes a wrong D (alpha doubled). */
        const char *wrong = ENV_ONCE("FAKEHIPLT_WRONG_INDEX");
        if (wrong && atoi(wrong) == index) {
            float twice = 2 * *(const float *)alpha;
            compute_d(desc, &twice, A, Ad, B, Bd, beta, C, Cd, D, Dd);
        }
    }
    trace(Dd, k_of(desc, Ad), algo, ok);
}

} // extern "C"

// ---- hipblaslt_ext: the C++ functions, with the real header's signatures ----------------
namespace hipblaslt_ext {

enum class GemmType { HIPBLASLT_GEMM = 1, HIPBLASLT_GROUPED_GEMM = 2 };

hipblasStatus_t getAllAlgos(hipblasLtHandle_t handle, GemmType typeGemm, hipblasOperation_t opA,
                            hipblasOperation_t opB, hipDataType typeA, hipDataType typeB, hipDataType typeC,
                            hipDataType typeD, hipblasComputeType_t typeCompute,
                            std::vector<hipblasLtMatmulHeuristicResult_t> &heuristicResults) {
    static const int all[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 500, 998, 999};
    if (!handle) return HIPBLAS_STATUS_NOT_INITIALIZED;
    try {
        heuristicResults.clear();
        for (int index : all) heuristicResults.push_back(result_of(index));
    } catch (const std::bad_alloc &) {
        return HIPBLAS_STATUS_ALLOC_FAILED;
    }
    return HIPBLAS_STATUS_SUCCESS;
}

int getIndexFromAlgo(hipblasLtMatmulAlgo_t &algo) {
    int32_t index;
    return decode(&algo, &index) ? index : -1;
}

hipblasStatus_t getAlgosFromIndex(hipblasLtHandle_t handle, std::vector<int> &algoIndex,
                                  std::vector<hipblasLtMatmulHeuristicResult_t> &heuristicResults) {
    if (!handle) return HIPBLAS_STATUS_NOT_INITIALIZED;
    /* Index 1000 and up throw, as a library indexing a table this build does not have
     * with .at() would: the C++ exception leaves this function. */
    for (int index : algoIndex)
        if (index >= 1000 && index < 2000) throw std::out_of_range("no such solution index");
    try {
        heuristicResults.clear();
        for (int index : algoIndex)
            if (index >= 0 && index <= 999) heuristicResults.push_back(result_of(index));
    } catch (const std::bad_alloc &) {
        return HIPBLAS_STATUS_ALLOC_FAILED;
    }
    return HIPBLAS_STATUS_SUCCESS;
}

hipblasStatus_t matmulIsAlgoSupported(hipblasLtHandle_t handle, hipblasLtMatmulDesc_t matmulDesc, const void *alpha,
                                      hipblasLtMatrixLayout_t Adesc, hipblasLtMatrixLayout_t Bdesc, const void *beta,
                                      hipblasLtMatrixLayout_t Cdesc, hipblasLtMatrixLayout_t Ddesc,
                                      hipblasLtMatmulAlgo_t &algo, size_t &workspaceSizeInBytes) {
    if (!handle) return HIPBLAS_STATUS_NOT_INITIALIZED;
    if (fail_once("check")) return HIPBLAS_STATUS_INVALID_VALUE;
    int index = index_of(&algo);
    if (index < 0) return HIPBLAS_STATUS_INVALID_VALUE;
    if (index == 999) return HIPBLAS_STATUS_NOT_SUPPORTED;
    auto layout = [](hipblasLtMatrixLayout_t l) { return reinterpret_cast<const Layout *>(l); };
    if (!problem_agrees(reinterpret_cast<const Desc *>(matmulDesc), layout(Adesc), layout(Bdesc), layout(Cdesc),
                        layout(Ddesc)))
        return HIPBLAS_STATUS_INVALID_VALUE;
    workspaceSizeInBytes = workspace_of(index);
    return HIPBLAS_STATUS_SUCCESS;
}

} // namespace hipblaslt_ext
