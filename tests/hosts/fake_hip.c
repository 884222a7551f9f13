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

#include "env_once.h"
#include "fake_runtime.h"

static int device(void) {
    const char *v = ENV_ONCE("FAKEHIP_DEVICE");
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
/* Streams, stream capture and graphs: work issued on a capturing stream by a library that
 * asks fakehip_capture (the hipBLASLt stand-in) is recorded instead of run; a graph runs its
 * recorded work in order when launched. FAKEHIP_NO_GRAPHS=1: capture is refused (900,
 * hipErrorStreamCaptureUnsupported), as by a HIP without graph support;
 * FAKEHIP_GRAPH_FAIL_AFTER=N: after N captures. */
typedef struct Op {
    void (*run)(void *);
    void (*release)(void *);
    void *arg;
    struct Op *next;
} Op;
typedef struct {
    int refs; /* the graph and each executable made from it */
    Op *head;
} Ops;
typedef struct {
    int capturing;
    Op *head, *tail;
} Stream;
typedef struct {
    Ops *ops;
} Graph;

static void ops_release(Ops *o) {
    if (!o || --o->refs > 0) return;
    for (Op *op = o->head, *next; op; op = next) {
        next = op->next;
        op->release(op->arg);
        free(op);
    }
    free(o);
}

int hipStreamCreate(Stream **s) { *s = calloc(1, sizeof **s); return *s ? 0 : 2; }
int hipStreamSynchronize(Stream *s) { (void)s; return 0; }
int hipStreamDestroy(Stream *s) { free(s); return 0; }
int hipStreamBeginCapture(Stream *s, int mode) {
    (void)mode;
    /* FAKEHIP_GRAPH_FAIL_AFTER=N: the first N captures work, later ones are refused. */
    static long captures;
    const char *after = ENV_ONCE("FAKEHIP_GRAPH_FAIL_AFTER");
    const char *no = ENV_ONCE("FAKEHIP_NO_GRAPHS");
    if (!s || (no && no[0] == '1') || (after && captures++ >= atol(after))) return 900;
    if (s->capturing) return 401; /* hipErrorIllegalState */
    s->capturing = 1;
    s->head = s->tail = NULL;
    return 0;
}
int hipStreamEndCapture(Stream *s, Graph **g) {
    if (!s || !s->capturing) return 401; /* hipErrorIllegalState */
    Ops *o = calloc(1, sizeof *o);
    *g = calloc(1, sizeof **g);
    if (!o || !*g) return 2;
    o->refs = 1;
    o->head = s->head;
    (*g)->ops = o;
    s->capturing = 0;
    s->head = s->tail = NULL;
    return 0;
}
int hipGraphInstantiateWithFlags(Graph **exec, Graph *g, unsigned long long flags) {
    (void)flags;
    if (!g || !exec) return 1;
    *exec = calloc(1, sizeof **exec);
    if (!*exec) return 2;
    (*exec)->ops = g->ops;
    g->ops->refs++;
    return 0;
}
int hipGraphLaunch(Graph *exec, Stream *s) {
    (void)s;
    if (!exec) return 1;
    for (Op *op = exec->ops->head; op; op = op->next) op->run(op->arg);
    return 0;
}
int hipGraphExecDestroy(Graph *g) {
    if (!g) return 1;
    ops_release(g->ops);
    free(g);
    return 0;
}
int hipGraphDestroy(Graph *g) { return hipGraphExecDestroy(g); }

/* For the hipBLASLt stand-in: 1 when `stream` is capturing, and then `run(arg)` is recorded
 * to run at each launch (`release(arg)` when the graph goes); 0 otherwise: run it now. */
int fakehip_capture(void *stream, void (*run)(void *), void (*release)(void *), void *arg) {
    Stream *s = stream;
    if (!s || !s->capturing) return 0;
    Op *op = calloc(1, sizeof *op);
    if (!op) return 0;
    op->run = run;
    op->release = release;
    op->arg = arg;
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    return 1;
}
FAKE_EVENTS(hip)
int hipEventDestroy(Event *e) { free(e); return 0; }
