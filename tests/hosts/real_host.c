/* real_host: a host for the conformance checks (tests/conformance/), built inside a Debian root
 * with its own compiler against the REAL rocBLAS headers and library. With no AMD GPU,
 * rocblas_create_handle fails (status 1) and leaves the handle NULL; the host goes on and makes
 * every GEMM call with that handle, the way a server that ignores the error would, and prints
 * what the library returned. Nothing is computed (the buffers are host memory rocBLAS never
 * touches when it rejects the handle); what matters is that the statuses are the same with and
 * without the interposer, and which calls reach it with which key.
 *
 * usage: real_host [--version] SPEC...
 *   SPEC = KIND:AB:TYPE:M:N:K (as gemm_host.c), KIND = ex | sb | bx | hgemm | sgemm | hsb | ssb,
 *          or any of them with a 64 suffix (ex64, sb64, ...) for the _64 API where the
 *          library has it (built with -DHAVE_ROCBLAS_64)
 *   prints: create=<status> handle=<null|set>, version=<string> (with --version), then
 *           spec=<SPEC> status=<status> per SPEC
 * Built with -DREAL_HOST_MODULE it is a module exporting host_main (for dl_host and Python).
 */
#include <rocblas/rocblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

struct spec {
    char text[128];
    char kind[16];
    rocblas_operation ta, tb;
    rocblas_datatype type, compute;
    int m, n, k;
};

static int parse(const char *text, struct spec *s) {
    char ab[4] = {0}, ty[4] = {0};
    memset(s, 0, sizeof *s);
    snprintf(s->text, sizeof s->text, "%s", text);
    if (sscanf(text, "%15[^:]:%3[^:]:%3[^:]:%d:%d:%d", s->kind, ab, ty, &s->m, &s->n, &s->k) < 6)
        return -1;
    int ta, tb, type, compute;
    if (spec_types(s->kind, 1, ab, ty, &ta, &tb, &type, &compute)) return -1;
    s->ta = (rocblas_operation)ta;
    s->tb = (rocblas_operation)tb;
    s->type = (rocblas_datatype)type;
    s->compute = (rocblas_datatype)compute;
    return 0;
}

static rocblas_status call(rocblas_handle h, const struct spec *s) {
    static char buf[1 << 16];
    const void *a = buf, *b = buf;
    void *c = buf;
    const void *pa[2] = {buf, buf}, *pb[2] = {buf, buf};
    void *pc[2] = {buf, buf};
    float alpha = 1.0f, beta = 0.0f;
    rocblas_half alpha_h, beta_h;
    memset(&alpha_h, 0, sizeof alpha_h);
    memset(&beta_h, 0, sizeof beta_h);
    const char *kind = s->kind;
    rocblas_int m = s->m, n = s->n, k = s->k;
    rocblas_int lda = s->ta == rocblas_operation_none ? m : k;
    rocblas_int ldb = s->tb == rocblas_operation_none ? k : n;
    rocblas_int ldc = m;
    rocblas_stride sa = (rocblas_stride)lda * (s->ta == rocblas_operation_none ? k : m);
    rocblas_stride sb = (rocblas_stride)ldb * (s->tb == rocblas_operation_none ? n : k);
    rocblas_stride sc = (rocblas_stride)ldc * n;
    const void *al = s->compute == rocblas_datatype_f16_r ? (const void *)&alpha_h : (const void *)&alpha;
    const void *be = s->compute == rocblas_datatype_f16_r ? (const void *)&beta_h : (const void *)&beta;
    rocblas_datatype t = s->type;
    if (!strcmp(kind, "ex"))
        return rocblas_gemm_ex(h, s->ta, s->tb, m, n, k, al, a, t, lda, b, t, ldb, be, c, t, ldc, c, t, ldc,
                               s->compute, rocblas_gemm_algo_standard, 0, 0);
    if (!strcmp(kind, "sb"))
        return rocblas_gemm_strided_batched_ex(h, s->ta, s->tb, m, n, k, al, a, t, lda, sa, b, t, ldb, sb, be, c, t,
                                               ldc, sc, c, t, ldc, sc, 3, s->compute,
                                               rocblas_gemm_algo_standard, 0, 0);
    if (!strcmp(kind, "bx"))
        return rocblas_gemm_batched_ex(h, s->ta, s->tb, m, n, k, al, pa, t, lda, pb, t, ldb, be, pc, t, ldc, pc, t,
                                       ldc, 2, s->compute, rocblas_gemm_algo_standard, 0, 0);
    if (!strcmp(kind, "hgemm"))
        return rocblas_hgemm(h, s->ta, s->tb, m, n, k, &alpha_h, a, lda, b, ldb, &beta_h, c, ldc);
    if (!strcmp(kind, "sgemm"))
        return rocblas_sgemm(h, s->ta, s->tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
    if (!strcmp(kind, "hsb"))
        return rocblas_hgemm_strided_batched(h, s->ta, s->tb, m, n, k, &alpha_h, a, lda, sa, b, ldb, sb, &beta_h,
                                             c, ldc, sc, 2);
    if (!strcmp(kind, "ssb"))
        return rocblas_sgemm_strided_batched(h, s->ta, s->tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c,
                                             ldc, sc, 2);
#ifdef HAVE_ROCBLAS_64
    int64_t m6 = m, n6 = n, k6 = k, lda6 = lda, ldb6 = ldb, ldc6 = ldc;
    if (!strcmp(kind, "ex64"))
        return rocblas_gemm_ex_64(h, s->ta, s->tb, m6, n6, k6, al, a, t, lda6, b, t, ldb6, be, c, t, ldc6, c, t,
                                  ldc6, s->compute, rocblas_gemm_algo_standard, 0, 0);
    if (!strcmp(kind, "sb64"))
        return rocblas_gemm_strided_batched_ex_64(h, s->ta, s->tb, m6, n6, k6, al, a, t, lda6, sa, b, t, ldb6, sb,
                                                  be, c, t, ldc6, sc, c, t, ldc6, sc, 3, s->compute,
                                                  rocblas_gemm_algo_standard, 0, 0);
    if (!strcmp(kind, "bx64"))
        return rocblas_gemm_batched_ex_64(h, s->ta, s->tb, m6, n6, k6, al, pa, t, lda6, pb, t, ldb6, be, pc, t,
                                          ldc6, pc, t, ldc6, 2, s->compute, rocblas_gemm_algo_standard, 0, 0);
    if (!strcmp(kind, "hgemm64"))
        return rocblas_hgemm_64(h, s->ta, s->tb, m6, n6, k6, &alpha_h, a, lda6, b, ldb6, &beta_h, c, ldc6);
    if (!strcmp(kind, "sgemm64"))
        return rocblas_sgemm_64(h, s->ta, s->tb, m6, n6, k6, &alpha, a, lda6, b, ldb6, &beta, c, ldc6);
    if (!strcmp(kind, "hsb64"))
        return rocblas_hgemm_strided_batched_64(h, s->ta, s->tb, m6, n6, k6, &alpha_h, a, lda6, sa, b, ldb6, sb,
                                                &beta_h, c, ldc6, sc, 2);
    if (!strcmp(kind, "ssb64"))
        return rocblas_sgemm_strided_batched_64(h, s->ta, s->tb, m6, n6, k6, &alpha, a, lda6, sa, b, ldb6, sb,
                                                &beta, c, ldc6, sc, 2);
#endif
    return (rocblas_status)-2;
}

int host_main(int argc, char **argv) {
    rocblas_handle h = NULL;
    rocblas_status created = rocblas_create_handle(&h);
    printf("create=%d handle=%s\n", (int)created, h ? "set" : "null");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) {
            size_t size = 0;
            rocblas_get_version_string_size(&size);
            char *v = calloc(size + 1, 1);
            rocblas_get_version_string(v, size);
            printf("version=%s\n", v);
            free(v);
            continue;
        }
        struct spec s;
        if (parse(argv[i], &s) != 0) {
            fprintf(stderr, "real_host: bad spec %s\n", argv[i]);
            return 2;
        }
        printf("spec=%s status=%d\n", s.text, (int)call(h, &s));
    }
    if (h) rocblas_destroy_handle(h);
    fflush(stdout);
    return 0;
}

#ifndef REAL_HOST_MODULE
int main(int argc, char **argv) { return host_main(argc, argv); }
#endif
