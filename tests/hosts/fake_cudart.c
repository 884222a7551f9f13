/* A stand-in for libcudart.so for the CPU tests of `tunedblas lt tune`: the C ABI of the
 * CUDA runtime calls the harness makes (values from cuda_runtime_api.h), on the host.
 * "Device" memory is malloc'd, copies and sets are memcpy/memset, streams run everything
 * at once, an event is the time it was recorded. No graph symbols: the harness times with
 * events. $FAKECUDA_DEVICES devices (1 when unset) answer as sm_90 with 1 MiB of L2 each, each
 * thread on the device it last set. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env_once.h"
#include "fake_runtime.h"


int cudaMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMemcpy(void *d, const void *s, size_t n, int kind) { (void)kind; memmove(d, s, n); return 0; }
int cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st) {
    (void)st;
    return cudaMemcpy(d, s, n, kind);
}
int cudaMemsetAsync(void *p, int v, size_t n, void *st) { (void)st; return cudaMemset(p, v, n); }
FAKE_EVENTS(cuda)
int cudaStreamCreate(void **s) { *s = malloc(1); return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
const char *cudaGetErrorString(int e) { return e ? "stand-in error" : "no error"; }
int cudaGetLastError(void) { return 0; }
int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }
static int devices(void) {
    const char *v = ENV_ONCE("FAKECUDA_DEVICES");
    return v ? atoi(v) : 1;
}
static __thread int current;
int cudaGetDeviceCount(int *n) { *n = devices(); return 0; }
int cudaSetDevice(int d) { if (d < 0 || d >= devices()) return 101; current = d; return 0; }
int cudaGetDevice(int *d) { *d = current; return 0; }
int cudaEventDestroy(Event *e) { free(e); return 0; }
int cudaStreamDestroy(void *s) { free(s); return 0; }
int cudaDeviceGetAttribute(int *v, int attr, int device) {
    if (device < 0 || device >= devices()) return 101; /* cudaErrorInvalidDevice */
    switch (attr) {
    case 16: *v = 8; return 0;       /* SMs: a made-up card */
    case 38: *v = 1 << 20; return 0; /* L2 bytes */
    case 75: *v = 9; return 0;       /* compute capability */
    case 76: *v = 0; return 0;
    default: *v = 1; return 0;
    }
}
