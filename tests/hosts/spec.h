/* The part of a SPEC (KIND:AB:TYPE:M:N:K...) the GEMM hosts read alike (gemm_host.c,
 * real_host.c): transposes and types, in rocBLAS's values (rocblas-types.h), which
 * gemm_host.c names without rocBLAS's headers. */
#ifndef SPEC_H
#define SPEC_H

#include <stdio.h>
#include <string.h>

enum { SPEC_OP_N = 111, SPEC_OP_T = 112 };
enum { SPEC_F16 = 150, SPEC_F32 = 151, SPEC_F64 = 152, SPEC_BF16 = 168 };

/* The transposes of the AB letters and the data and compute types of TYPE (h: f16 with f32
 * compute, hh: f16, b: bf16 with f32 compute, s: f32, d: f64), which the typed calls fix
 * (hgemm and hsb: hh; sgemm and ssb: s; with `prefix`, any kind they begin, as hgemm64).
 * 0, or -1 for a TYPE it does not know. */
static inline int spec_types(const char *kind, int prefix, const char *ab, const char *type_letters,
                             int *ta, int *tb, int *type, int *compute) {
    char ty[4];
    snprintf(ty, sizeof ty, "%s", type_letters);
    const char *typed[][2] = {{"hgemm", "hh"}, {"hsb", "hh"}, {"sgemm", "s"}, {"ssb", "s"}};
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) {
        const char *k = typed[i][0];
        if (prefix ? !strncmp(kind, k, strlen(k)) : !strcmp(kind, k)) snprintf(ty, sizeof ty, "%s", typed[i][1]);
    }
    static const struct { const char *letters; int type, compute; } types[] = {
        {"h", SPEC_F16, SPEC_F32}, {"hh", SPEC_F16, SPEC_F16}, {"b", SPEC_BF16, SPEC_F32},
        {"s", SPEC_F32, SPEC_F32}, {"d", SPEC_F64, SPEC_F64},
    };
    *ta = ab[0] == 'T' ? SPEC_OP_T : SPEC_OP_N;
    *tb = ab[1] == 'T' ? SPEC_OP_T : SPEC_OP_N;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (!strcmp(ty, types[i].letters)) {
            *type = types[i].type;
            *compute = types[i].compute;
            return 0;
        }
    }
    return -1;
}

#endif
