// The exception guard around hipBLASLt's C++ extension API, for libtunedblas.so.
//
// `hipblaslt_ext::getAlgosFromIndex` and friends are C++ functions taking std::vectors, and
// a C++ exception thrown out of them (std::out_of_range for an index this build lacks,
// std::bad_alloc) cannot be caught by Rust: the host would abort. This file is compiled by
// preload/build.rs into a small shared object that is embedded in libtunedblas.so and
// loaded (from a memfd, RTLD_LOCAL) only in a process that serves a hipBLASLt row (and into
// the `tunedblas` command when it tunes hipBLASLt, cli/build.rs); each
// function calls the hipBLASLt function it is given, owns the vectors (built by the C++
// compiler, so nothing about their layout is assumed), and turns any exception into a
// status. It links only libstdc++, which hipBLASLt has already loaded.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

// hipblasLtMatmulAlgo_t and hipblasLtMatmulHeuristicResult_t (src/abi.rs, checked against
// the real headers by tests/conformance).
struct Algo {
    uint8_t data[16];
    size_t max_workspace_bytes;
};
struct Result {
    Algo algo;
    size_t workspace_size;
    int32_t state;
    float waves_count;
    int32_t reserved[4];
};
static_assert(sizeof(Algo) == 24, "hipblasLtMatmulAlgo_t");
static_assert(sizeof(Result) == 56, "hipblasLtMatmulHeuristicResult_t");

using FromIndex = int (*)(void *, std::vector<int> &, std::vector<Result> &);
using IndexOf = int (*)(Algo &);
using AllAlgos = int (*)(void *, int, int, int, int, int, int, int, int, std::vector<Result> &);
using Supported = int (*)(void *, void *, const void *, void *, void *, const void *, void *, void *, Algo &,
                          size_t &);

// What a thrown exception becomes (no hipblasStatus_t has this value).
constexpr int THREW = -1000;

} // namespace

extern "C" {

// getAlgosFromIndex(handle, {index}, results): the first result's algorithm in *out.
// Returns the library's status, -1 when it found none, THREW when it threw.
__attribute__((visibility("default"))) int tunedblas_guard_algo_from_index(void *f, void *handle, int index,
                                                                           Algo *out) {
    try {
        std::vector<int> indices{index};
        std::vector<Result> results;
        int st = reinterpret_cast<FromIndex>(f)(handle, indices, results);
        if (st != 0) return st;
        if (results.empty()) return -1;
        *out = results.front().algo;
        return 0;
    } catch (...) {
        return THREW;
    }
}

// getIndexFromAlgo(algo); THREW when it threw.
__attribute__((visibility("default"))) int tunedblas_guard_index_of(void *f, Algo *algo, int *index) {
    try {
        *index = reinterpret_cast<IndexOf>(f)(*algo);
        return 0;
    } catch (...) {
        return THREW;
    }
}

// matmulIsAlgoSupported(handle, desc, alpha, A, B, beta, C, D, algo, workspace).
__attribute__((visibility("default"))) int tunedblas_guard_is_supported(void *f, void *handle, void *desc,
                                                                        const void *alpha, void *a, void *b,
                                                                        const void *beta, void *c, void *d,
                                                                        Algo *algo, size_t *workspace) {
    try {
        return reinterpret_cast<Supported>(f)(handle, desc, alpha, a, b, beta, c, d, *algo, *workspace);
    } catch (...) {
        return THREW;
    }
}

// getAllAlgos(handle, gemm_type, opA, opB, typeA, typeB, typeC, typeD, compute, results):
// the first `cap` results copied to `out`, how many there were in *total. Used by the
// `tunedblas` command's tuner, never by the interposer. (GemmType and the enums are passed
// as int: each is an int-sized enum in hipblaslt.h, checked by tests/conformance.)
__attribute__((visibility("default"))) int tunedblas_guard_all_algos(void *f, void *handle, int gemm_type, int op_a,
                                                                     int op_b, int type_a, int type_b, int type_c,
                                                                     int type_d, int compute, Result *out,
                                                                     size_t cap, size_t *total) {
    try {
        std::vector<Result> results;
        int st = reinterpret_cast<AllAlgos>(f)(handle, gemm_type, op_a, op_b, type_a, type_b, type_c, type_d, compute,
                                               results);
        if (st != 0) return st;
        *total = results.size();
        for (size_t i = 0; i < results.size() && i < cap; i++) out[i] = results[i];
        return 0;
    } catch (...) {
        return THREW;
    }
}

} // extern "C"
