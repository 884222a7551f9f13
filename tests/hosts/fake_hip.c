/* A stand-in for libamdhip64.so.6 for the CPU tests of the hipBLASLt path, as fake_cudart.c
 * is for CUDA: what the hipBLASLt stand-in, the interposer and `tunedblas lt tune` ask of
 * the HIP runtime (values from hip_runtime_api.h), on the host. "Device" memory is
 * malloc'd, copies and sets are memmove/memset, a stream runs everything at once, an event
 * is the time it was recorded. hipGetDevice answers the device $FAKEHIP_DEVICE (0 when
 * unset); a negative one makes it and hipGetDeviceCount fail with hipErrorNoDevice (100),
 * as on a machine without a GPU. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int device(void) {
    const char *v = getenv("FAKEHIP_DEVICE");
    return v ? atoi(v) : 0;
}

int hipGetDevice(int *d) {
    if (!d) return 1; /* hipErrorInvalidValue */
    if (device() < 0) return 100;
    *d = device();
    return 0;
}
int hipGetDeviceCount(int *n) {
    if (!n) return 1;
    if (device() < 0) return 100;
    *n = device() + 1;
    return 0;
}
int hipSetDevice(int d) { return d >= 0 && d <= device() ? 0 : 101; /* hipErrorInvalidDevice */ }
int hipRuntimeGetVersion(int *v) { *v = 60443000; return 0; }
int hipMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int hipFree(void *p) { free(p); return 0; }
int hipMemcpy(void *d, const void *s, size_t n, int kind) { (void)kind; memmove(d, s, n); return 0; }
int hipMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
int hipStreamCreate(void **s) { *s = malloc(1); return 0; }
int hipStreamSynchronize(void *s) { (void)s; return 0; }
int hipStreamDestroy(void *s) { free(s); return 0; }
typedef struct { double ms; } Event;
int hipEventCreate(Event **e) { *e = calloc(1, sizeof **e); return *e ? 0 : 2; }
int hipEventDestroy(Event *e) { free(e); return 0; }
int hipEventRecord(Event *e, void *st) {
    (void)st;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    e->ms = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
    return 0;
}
int hipEventSynchronize(Event *e) { (void)e; return 0; }
int hipEventElapsedTime(float *ms, Event *a, Event *b) { *ms = (float)(b->ms - a->ms); return 0; }
