/* The cuBLASLt test host. Built twice from this file:
 * - with -DLT_MODULE as libltmod.so, linked against libcublasLt.so.13: `lt_linear` issues a
 *   bf16 F.linear the way PyTorch's cuBLASLt path does (descriptors, heuristic with one
 *   answer, cublasLtMatmul with that answer), calling cublasLtMatmul through its PLT;
 * - as the program lt_host, which loads that module with RTLD_LOCAL (as Python loads
 *   extension modules, so cuBLASLt sits in a local scope) and runs each argument:
 *     N,M,K[,workspace_bytes[,misalign]]   one F.linear(x[M,K], W[N,K])
 *     off | on                            tunedblas_cublaslt_serving(0 | 1), if preloaded
 *   printing `call=<arg> status=<s>`; exit 1 if any call failed. And the process-life
 *   steps of life_host.c, with F.linear calls of new shapes (N = 1, 2, ...; M = K = 8):
 *     @storm:T:N     T threads make new shapes while N children are forked one after
 *                    another, each making one call and leaving with _exit; prints
 *                    storm-hung=H (a child not gone in 10 s is killed)
 *     @sigexit:T     T threads make new shapes; after 100 ms the process sends itself
 *                    SIGTERM, whose handler calls _exit(7)
 *     @vfork-fail    vfork, exec a path that does not exist, _exit(127) in the child
 *     @Exit          _Exit(0)
 *     @exec:PATH     execv(PATH, {PATH})
 *     @cancel:N      N times: a thread making calls without pause (a pthread_testcancel
 *                    between them) is cancelled and joined; prints cancelled=N
 *     @pause         print "paused" and wait for signals forever
 *     @plant:DIR:VICTIM  symlinks to VICTIM under this process's cuBLASLt rank-0 miss-file
 *                    names in DIR (log, counts)
 *     @link:DIR:VICTIM   a hard link to VICTIM under the miss-log name
 *     @fifo:DIR          a FIFO under the miss-log name
 *     @threads:T:N   T threads each make N calls of 8,8,8 and N of 16,8,8 at once
 *     @module:PATH   dlopen another module (RTLD_LOCAL): later calls go through it
 *     @close         dlclose the last module opened: later calls go through the one before
 *   With "-" as MODULE no module is opened at start: the host first calls cublasLtMatmul as
 *   the global scope has it (the interposer's, preloaded) with no cuBLASLt loaded and prints
 *   early=<status>; then @module:PATH opens one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LT_MODULE
typedef struct { uint64_t data[8]; } Algo;
typedef struct { Algo algo; size_t workspace; int32_t state; float waves; int32_t reserved[4]; } Result;
int cublasLtCreate(void **h);
int cublasLtMatmulDescCreate(void **d, int32_t compute, int32_t scale);
int cublasLtMatmulDescDestroy(void *d);
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *buf, size_t size);
int cublasLtMatrixLayoutCreate(void **l, uint32_t type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutDestroy(void *l);
int cublasLtMatmulPreferenceCreate(void **p);
int cublasLtMatmulPreferenceDestroy(void *p);
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t size);
int cublasLtMatmulAlgoGetHeuristic(void *h, void *d, void *A, void *B, void *C, void *D, void *p,
                                   int requested, Result *out, int *returned);
int cublasLtMatmul(void *h, void *desc, const void *alpha, const void *A, void *Ad, const void *B,
                   void *Bd, const void *beta, const void *C, void *Cd, void *D, void *Dd,
                   const Algo *algo, void *ws, size_t ws_bytes, void *stream);

static void *handle;
static char *buffer;

int lt_linear(long n_out, long tokens, long k, size_t ws_bytes, int misalign) {
    if (!handle && cublasLtCreate(&handle) != 0) return -1;
    if (!buffer) buffer = aligned_alloc(256, 1 << 20);
    void *desc, *A, *B, *C, *pref;
    int32_t t = 1, n = 0;
    cublasLtMatmulDescCreate(&desc, 68 /* COMPUTE_32F */, 0 /* R_32F */);
    cublasLtMatmulDescSetAttribute(desc, 3, &t, 4);
    cublasLtMatmulDescSetAttribute(desc, 4, &n, 4);
    cublasLtMatrixLayoutCreate(&A, 14 /* R_16BF */, k, n_out, k);
    cublasLtMatrixLayoutCreate(&B, 14, k, tokens, k);
    cublasLtMatrixLayoutCreate(&C, 14, n_out, tokens, n_out);
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t ws = ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, 1, &ws, 8);
    Result r;
    int returned = 0;
    int st = cublasLtMatmulAlgoGetHeuristic(handle, desc, A, B, C, C, pref, 1, &r, &returned);
    if (st == 0 && returned == 1) {
        float alpha = 1, beta = 0;
        st = cublasLtMatmul(handle, desc, &alpha, buffer + (misalign ? 2 : 0), A, buffer + 4096,
                            B, &beta, buffer + 8192, C, buffer + 8192, C, &r.algo,
                            ws_bytes ? buffer + 65536 : NULL, ws_bytes, NULL);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(A);
    cublasLtMatrixLayoutDestroy(B);
    cublasLtMatrixLayoutDestroy(C);
    cublasLtMatmulDescDestroy(desc);
    return st;
}
#else
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "miss_names.h"

static int (*linear)(long, long, long, size_t, int);
static void *modules[8];
static int (*linears[8])(long, long, long, size_t, int);
static int n_modules;
static volatile int stop;

static void *shapes(void *p) {
    long id = (long)p;
    for (long i = 0; !stop; i++) linear(1 + (id * 997 + i) % 2048, 8, 8, 0, 0);
    return NULL;
}

static void start(int t, pthread_t *tid) {
    stop = 0;
    for (long i = 0; i < t && i < 64; i++) pthread_create(&tid[i], NULL, shapes, (void *)i);
}

static void *cancellable(void *p) {
    (void)p;
    for (long i = 0;; i++) {
        linear(1 + i % 2048, 8, 8, 0, 0);
        pthread_testcancel();
    }
    return NULL;
}

static int per_thread;
static void *repeat_calls(void *p) {
    (void)p;
    for (int i = 0; i < per_thread; i++) {
        linear(8, 8, 8, 0, 0);
        linear(16, 8, 8, 0, 0);
    }
    return NULL;
}

static void on_term(int sig) {
    (void)sig;
    _exit(7);
}

static int life_step(const char *a) {
    pthread_t tid[64];
    if (!strncmp(a, "@storm:", 7)) {
        int t = atoi(a + 7), n = strchr(a + 7, ':') ? atoi(strchr(a + 7, ':') + 1) : 10, hung = 0;
        start(t, tid);
        for (int c = 0; c < n; c++) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                linear(4096 - c, 8, 8, 0, 0);
                _exit(0);
            }
            int done = 0;
            for (int w = 0; w < 10000 && !done; w++) {
                if (waitpid(pid, NULL, WNOHANG) == pid) done = 1;
                else usleep(1000);
            }
            if (!done) { hung++; kill(pid, SIGKILL); waitpid(pid, NULL, 0); }
        }
        stop = 1;
        for (int i = 0; i < t && i < 64; i++) pthread_join(tid[i], NULL);
        printf("storm-hung=%d\n", hung);
    } else if (!strncmp(a, "@sigexit:", 9)) {
        signal(SIGTERM, on_term);
        start(atoi(a + 9), tid);
        usleep(100000);
        kill(getpid(), SIGTERM);
        for (;;) pause();
    } else if (!strcmp(a, "@vfork-fail")) {
        fflush(stdout);
        pid_t pid = vfork();
        if (pid == 0) {
            char *args[] = {"/nonexistent/tunedblas-test", NULL};
            execv(args[0], args);
            _exit(127);
        }
        int status = -1;
        waitpid(pid, &status, 0);
        printf("vfork-child=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    } else if (!strncmp(a, "@threads:", 9)) {
        int t = atoi(a + 9);
        const char *n = strchr(a + 9, ':');
        per_thread = n ? atoi(n + 1) : 1;
        for (int i = 0; i < t && i < 64; i++) pthread_create(&tid[i], NULL, repeat_calls, NULL);
        for (int i = 0; i < t && i < 64; i++) pthread_join(tid[i], NULL);
    } else if (!strncmp(a, "@plant:", 7)) {
        char dir[512], prefix[320], path[1024];
        const char *colon = strchr(a + 7, ':');
        if (!colon) return -1;
        snprintf(dir, sizeof dir, "%.*s", (int)(colon - (a + 7)), a + 7);
        miss_prefix_tagged(prefix, sizeof prefix, "-cublaslt");
        const char *suffixes[] = {".csv", ".counts.csv"};
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/%s%s", dir, prefix, suffixes[k]);
            if (symlink(colon + 1, path) != 0) { perror("lt_host: symlink"); return -1; }
        }
    } else if (!strncmp(a, "@link:", 6) || !strncmp(a, "@fifo:", 6)) {
        char dir[512], prefix[320], path[1024];
        const char *colon = strchr(a + 6, ':');
        snprintf(dir, sizeof dir, "%.*s", colon ? (int)(colon - (a + 6)) : (int)strlen(a + 6), a + 6);
        miss_prefix_tagged(prefix, sizeof prefix, "-cublaslt");
        snprintf(path, sizeof path, "%s/%s.csv", dir, prefix);
        int r = a[1] == 'l' ? (colon ? link(colon + 1, path) : -1) : mkfifo(path, 0600);
        if (r != 0) { perror("lt_host: plant"); return -1; }
    } else if (!strcmp(a, "@pause")) {
        printf("paused\n");
        fflush(stdout);
        for (;;) pause();
    } else if (!strncmp(a, "@cancel:", 8)) {
        int n = atoi(a + 8), done = 0;
        for (int i = 0; i < n; i++) {
            pthread_t t;
            void *r;
            pthread_create(&t, NULL, cancellable, NULL);
            usleep(5000);
            pthread_cancel(t);
            pthread_join(t, &r);
            done += r == PTHREAD_CANCELED;
        }
        printf("cancelled=%d\n", done);
    } else if (!strncmp(a, "@module:", 8)) {
        void *m = dlopen(a + 8, RTLD_NOW | RTLD_LOCAL);
        if (!m || n_modules == 8) { fprintf(stderr, "lt_host: %s\n", dlerror()); return -1; }
        modules[n_modules] = m;
        linears[n_modules++] = linear = (int (*)(long, long, long, size_t, int))dlsym(m, "lt_linear");
    } else if (!strcmp(a, "@close")) {
        if (n_modules == 0 || dlclose(modules[--n_modules]) != 0) return -1;
        linear = n_modules ? linears[n_modules - 1] : NULL;
        printf("closed\n");
    } else if (!strcmp(a, "@Exit")) {
        fflush(stdout);
        _Exit(0);
    } else if (!strncmp(a, "@exec:", 6)) {
        fflush(stdout);
        char *args[] = {(char *)a + 6, NULL};
        execv(a + 6, args);
        printf("exec-failed\n");
    } else {
        return -1;
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lt_host MODULE CALL...\n");
        return 2;
    }
    if (!strcmp(argv[1], "-")) {
        typedef int (*matmul_fn)(void *, void *, const void *, const void *, void *, const void *, void *,
                                 const void *, const void *, void *, void *, void *, const void *, void *,
                                 size_t, void *);
        matmul_fn f = (matmul_fn)dlsym(RTLD_DEFAULT, "cublasLtMatmul");
        if (f) printf("early=%d\n", f(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                         NULL, NULL, 0, NULL));
        else printf("early=absent\n");
        fflush(stdout);
    } else {
        void *mod = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!mod) {
            fprintf(stderr, "lt_host: %s\n", dlerror());
            return 2;
        }
        linear = (int (*)(long, long, long, size_t, int))dlsym(mod, "lt_linear");
        modules[0] = mod;
        linears[0] = linear;
        n_modules = 1;
    }
    int (*serving)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "tunedblas_cublaslt_serving");
    int failed = 0;
    for (int i = 2; i < argc; i++) {
        int st;
        if (argv[i][0] == '@') {
            if (life_step(argv[i]) != 0) return 2;
            continue;
        }
        if (!strcmp(argv[i], "off") || !strcmp(argv[i], "on")) {
            st = serving ? (serving(argv[i][1] == 'n'), 0) : -1;
        } else {
            long n = 0, m = 0, k = 0, misalign = 0;
            unsigned long ws = 0;
            if (sscanf(argv[i], "%ld,%ld,%ld,%lu,%ld", &n, &m, &k, &ws, &misalign) < 3) return 2;
            st = linear(n, m, k, ws, (int)misalign);
        }
        printf("call=%s status=%d\n", argv[i], st);
        failed |= st != 0;
    }
    return failed;
}
#endif
