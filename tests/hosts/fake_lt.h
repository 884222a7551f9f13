/* What the two Lt stand-ins share (fake_cublaslt.c, fake_hipblaslt.cpp; C and C++): a
 * getter's size rules, bf16 and f32 elements, and the small reference GEMM of their compute
 * mode (FAKELT_COMPUTE, FAKEHIPLT_COMPUTE). Both libraries number f32 0 and bf16 14. */
#ifndef FAKE_LT_H
#define FAKE_LT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A getter: size 0 asks for the attribute's size (in *written), any other size must be it.
 * 0, or -1 for a request the library refuses (its INVALID_VALUE). */
static inline int fake_lt_copy_out(const void *field, size_t want, void *buf, size_t size, size_t *written) {
    if (size == 0) {
        if (!written) return -1;
        *written = want;
        return 0;
    }
    if (size != want || !buf) return -1;
    memcpy(buf, field, want);
    if (written) *written = want;
    return 0;
}

/* A setter: the library takes a buffer of exactly the attribute's size (`exact`, cuBLASLt)
 * or of at least that size, reading its first bytes (hipBLASLt 7.1.1). 0, or -1. */
static inline int fake_lt_copy_in(void *field, size_t want, const void *buf, size_t size, int exact) {
    if ((exact ? size != want : size < want) || !buf) return -1;
    memcpy(field, buf, want);
    return 0;
}

/* Where attribute `attr` of an object (a descriptor, a layout) is and its size; NULL for
 * one the library does not know. */
typedef void *(*FakeLtField)(void *object, int attr, size_t *want);

/* Get and set an attribute of `object` through its field finder: 0, or -1 (a NULL object,
 * an unknown attribute, a size the rules above refuse). */
static inline int fake_lt_get(FakeLtField field, void *object, int attr, void *buf, size_t size, size_t *written) {
    size_t want;
    void *f = object ? field(object, attr, &want) : NULL;
    return f ? fake_lt_copy_out(f, want, buf, size, written) : -1;
}
static inline int fake_lt_set(FakeLtField field, void *object, int attr, const void *buf, size_t size, int exact) {
    size_t want;
    void *f = object ? field(object, attr, &want) : NULL;
    return f ? fake_lt_copy_in(f, want, buf, size, exact) : -1;
}

/* Element i of an f32 (type 0) or bf16 (type 14) matrix. */
static inline float fake_lt_load(const void *p, uint32_t type, uint64_t i) {
    if (type == 0) return ((const float *)p)[i];
    uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static inline void fake_lt_store(void *p, uint32_t type, uint64_t i, float v) {
    if (type == 0) {
        ((float *)p)[i] = v;
        return;
    }
    uint32_t bits;
    memcpy(&bits, &v, 4);
    bits += 0x7fff + ((bits >> 16) & 1); /* round to nearest even */
    ((uint16_t *)p)[i] = (uint16_t)(bits >> 16);
}

/* One operand of the reference GEMM: column-major, `ld` apart, transposed when `trans`. */
typedef struct {
    const void *p;
    uint32_t type;
    int64_t ld;
    int trans;
} FakeLtMatrix;

/* D (m x n, `ldd` apart) = alpha op(A) op(B) + beta C, inner size k, for problems of at most
 * 2^24 multiply-adds (larger ones are left alone). */
static inline void fake_lt_gemm(uint64_t m, uint64_t n, uint64_t k, float alpha, FakeLtMatrix a, FakeLtMatrix b,
                                float beta, FakeLtMatrix c, void *d, uint32_t d_type, int64_t ldd) {
    if (m * n * k > (1ull << 24)) return;
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            float acc = 0;
            for (uint64_t p = 0; p < k; p++)
                acc += fake_lt_load(a.p, a.type, a.trans ? p + i * a.ld : i + p * a.ld) *
                       fake_lt_load(b.p, b.type, b.trans ? j + p * b.ld : p + j * b.ld);
            float cv = beta != 0 ? beta * fake_lt_load(c.p, c.type, i + j * c.ld) : 0;
            fake_lt_store(d, d_type, i + j * ldd, alpha * acc + cv);
        }
}

#endif
