/* The program half of the F.linear test hosts (lt_host.c for cuBLASLt, hiplt_host.c for
 * hipBLASLt): `<host> MODULE ARG...` loads MODULE with RTLD_LOCAL (as Python loads extension
 * modules, so the BLAS library sits in a local scope), finds its entry point
 * `int linear(N, M, K, workspace_bytes, misalign)` and runs each argument:
 *   N,M,K[,workspace_bytes[,misalign]]   one F.linear(x[M,K], W[N,K])
 *   off | on                            the interposer's serving switch (0 | 1), if preloaded
 * printing `call=<arg> status=<s>`; exit 1 if any call failed. And the process-life steps of
 * life_host.c, with F.linear calls of new shapes (N = 1, 2, ...; M = K = 8):
 *   @storm:T:N     T threads make new shapes while N children are forked one after
 *                  another, each making one call and leaving with _exit; prints
 *                  storm-hung=H (a child not gone in 10 s is killed)
 *   @fork-churn:PATH:N  a thread dlopens and dlcloses PATH without pause while N children
 *                  are forked one after another, each making one call of 64,8,32 and
 *                  leaving with _exit (status 0 if it succeeded); prints churn-hung=H
 *                  churn-bad=B (a child not gone in 3 s is killed and counted hung)
 *   @sigexit:T     T threads make new shapes; after 100 ms the process sends itself
 *                  SIGTERM, whose handler calls _exit(7)
 *   @vfork-fail    vfork, exec a path that does not exist, _exit(127) in the child
 *   @Exit          _Exit(0)
 *   @exec:PATH     execv(PATH, {PATH})
 *   @cancel:N      N times: a thread making calls without pause (a pthread_testcancel
 *                  between them) is cancelled and joined; prints cancelled=N
 *   @pause         print "paused" and wait for signals forever
 *   @plant:DIR:VICTIM  (after a first miss) symlinks to VICTIM in place of this process's rank-0 miss-file names of
 *                  the backend (MISS_TAG) in DIR (log, counts)
 *   @link:DIR:VICTIM   a hard link to VICTIM under the miss-log name
 *   @fifo:DIR          a FIFO under the miss-log name
 *   @threads:T:N   T threads each make N calls of 8,8,8 and N of 16,8,8 at once
 *   @repeat:N:CALL N calls of CALL (N,M,K[,workspace_bytes[,misalign]]), as a long-running
 *                  process makes them; prints repeat-failed=<calls that failed>
 *   @module:PATH   dlopen another module (RTLD_LOCAL): later calls go through it (with
 *                  LINEAR_HOST_SAY_ENTRY=1 set, it prints entry=<address of its entry point>)
 *   @close         dlclose the last module opened: later calls go through the one before
 *   @each:SYMBOL:T:R  T threads per open module at once, each calling that module's
 *                  `int SYMBOL(int R)`; prints each-sum=<sum of the results> (or
 *                  each-missing=SYMBOL)
 *   @until:PATH:CALL  CALL every 5 ms until PATH exists (at most 120 s), as a serving
 *                  process makes them, printing `call=<CALL> status=<s>` for each
 *   @for:MS:CALL   the same for MS milliseconds
 *   @hold:ACTION:PATH  the next open of PATH (a profile's rank file: once the host runs,
 *                  only a reload of the interposer opens it) waits in the opening thread,
 *                  midway through the reload, while a thread of the host does ACTION; if no
 *                  open came in 120 s the thread prints hold=missed:
 *        fork:CALL:GATE  forks a child that makes CALL as @until:GATE:CALL does (printing
 *                  `child call=...`) and leaves with exit(0); prints hold=forked
 *        exit      prints hold=exit and sends SIGTERM to the opening thread, whose handler
 *                  calls _exit(7)
 *   @join          waits for the @hold thread and its child (60 s, then SIGKILL); prints
 *                  hold-child=<exit status>, hold-child=hung, or nothing without a child
 *   @memfd:PATH    copies PATH into a memfd and dlopens it as /proc/self/fd/<n> (as JITs
 *                  and packers load plugins), then looks MODULE_ENTRY up in what it got;
 *                  prints memfd-plugin=ok or memfd-plugin=MISSING
 * With "-" as MODULE no module is opened at start: the host first calls the matmul entry
 * (MATMUL_ENTRY, 16 arguments, all NULL or 0) as the global scope has it (the interposer's,
 * preloaded) with no library loaded and prints early=<status>; then @module:PATH opens one.
 *
 * The host exports open64 (built with -Wl,--export-dynamic-symbol=open64), so the
 * interposer's opens come here (@hold); unheld, each is the system call.
 *
 * The including file defines, as string literals:
 *   HOST_NAME      the program's name, for its messages
 *   MODULE_ENTRY   the module's entry point ("lt_linear")
 *   SERVING_ENTRY  the interposer's serving switch ("tunedblas_cublaslt_serving")
 *   MATMUL_ENTRY   the library's matmul ("cublasLtMatmul")
 *   MISS_TAG       the backend's miss-file tag ("-cublaslt") */
#ifndef LINEAR_HOST_H
#define LINEAR_HOST_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host_steps.h"
#include "miss_names.h"

typedef int (*linear_fn)(long, long, long, size_t, int);

static linear_fn linear;
static void *modules[8];
static linear_fn linears[8];
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

/* CALL (N,M,K) every 5 ms until GATE exists or LIMIT_MS passed (@until, @for, a @hold
 * child), each result printed after WHO. */
static int call_loop(const char *gate, long limit_ms, const char *call, const char *who) {
    long n = 0, m = 0, k = 0;
    if (sscanf(call, "%ld,%ld,%ld", &n, &m, &k) != 3) return -1;
    struct stat st;
    for (long waited = 0; waited < limit_ms; waited += 5) {
        if (gate && stat(gate, &st) == 0) break;
        printf("%scall=%s status=%d\n", who, call, linear(n, m, k, 0, 0));
        fflush(stdout);
        usleep(5000);
    }
    return 0;
}

/* @hold: what it waits for and does (see the top of this file). */
static char hold_path[1024], hold_call[64], hold_gate[1024];
static int hold_fork, hold_started, hold_armed, hold_fired, hold_released;
static pthread_t hold_thread, hold_opener;
static pid_t hold_child;

int open64(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    if (__atomic_load_n(&hold_armed, __ATOMIC_SEQ_CST) && !strcmp(path, hold_path) &&
        __atomic_exchange_n(&hold_armed, 0, __ATOMIC_SEQ_CST)) {
        hold_opener = pthread_self();
        __atomic_store_n(&hold_fired, 1, __ATOMIC_SEQ_CST);
        while (!__atomic_load_n(&hold_released, __ATOMIC_SEQ_CST)) usleep(1000);
    }
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static void *hold_run(void *p) {
    (void)p;
    for (int waited = 0; !__atomic_load_n(&hold_fired, __ATOMIC_SEQ_CST); waited++) {
        if (waited == 120000) {
            __atomic_store_n(&hold_armed, 0, __ATOMIC_SEQ_CST);
            printf("hold=missed\n");
            fflush(stdout);
            return NULL;
        }
        usleep(1000);
    }
    fflush(stdout);
    if (!hold_fork) {
        printf("hold=exit\n");
        fflush(stdout);
        pthread_kill(hold_opener, SIGTERM);
        for (;;) pause();
    }
    pid_t pid = fork();
    if (pid == 0) {
        call_loop(hold_gate, 120000, hold_call, "child ");
        exit(0);
    }
    hold_child = pid;
    printf("hold=forked\n");
    fflush(stdout);
    __atomic_store_n(&hold_released, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* @hold:fork:CALL:GATE:PATH or @hold:exit:PATH */
static int hold_step(const char *a) {
    hold_fork = !strncmp(a, "fork:", 5);
    if (hold_fork) {
        const char *call = a + 5, *gate = strchr(call, ':'), *path = gate ? strchr(gate + 1, ':') : NULL;
        if (!path || gate - call >= (long)sizeof hold_call || path - gate >= (long)sizeof hold_gate) return -1;
        snprintf(hold_call, sizeof hold_call, "%.*s", (int)(gate - call), call);
        snprintf(hold_gate, sizeof hold_gate, "%.*s", (int)(path - gate - 1), gate + 1);
        a = path + 1;
    } else if (!strncmp(a, "exit:", 5)) {
        signal(SIGTERM, on_term);
        a += 5;
    } else {
        return -1;
    }
    snprintf(hold_path, sizeof hold_path, "%s", a);
    __atomic_store_n(&hold_armed, 1, __ATOMIC_SEQ_CST);
    hold_started = pthread_create(&hold_thread, NULL, hold_run, NULL) == 0;
    return hold_started ? 0 : -1;
}

/* @join */
static void join_step(void) {
    if (hold_started) pthread_join(hold_thread, NULL);
    hold_started = 0;
    if (!hold_child) return;
    int status = 0, done = 0;
    for (int w = 0; w < 60000 && !done; w++) {
        if (waitpid(hold_child, &status, WNOHANG) == hold_child) done = 1;
        else usleep(1000);
    }
    if (!done) {
        kill(hold_child, SIGKILL);
        waitpid(hold_child, NULL, 0);
        printf("hold-child=hung\n");
    } else {
        printf("hold-child=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    hold_child = 0;
}

/* Opens a module (RTLD_LOCAL) and makes its entry point the one later calls go through. */
static int open_module(const char *path) {
    void *m = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!m || n_modules == 8) {
        fprintf(stderr, HOST_NAME ": %s\n", m ? "too many modules" : dlerror());
        return -1;
    }
    modules[n_modules] = m;
    linears[n_modules++] = linear = (linear_fn)dlsym(m, MODULE_ENTRY);
    /* LINEAR_HOST_SAY_ENTRY=1: where the module's entry point landed (a test that needs a
     * module opened where a closed one was, its call sites at the closed one's addresses). */
    if (getenv("LINEAR_HOST_SAY_ENTRY")) printf("entry=%p\n", (void *)linear);
    return 0;
}

typedef int (*each_fn)(int);
struct each_arg {
    each_fn f;
    int r, result;
};
static void *each_thread(void *p) {
    struct each_arg *e = p;
    e->result = e->f(e->r);
    return NULL;
}

/* @each:SYMBOL:T:R */
static int each_step(const char *spec) {
    char name[64];
    int t = 1, r = 1;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len >= sizeof name) return -1;
    memcpy(name, spec, len);
    name[len] = 0;
    if (colon && sscanf(colon + 1, "%d:%d", &t, &r) < 1) return -1;
    if (t < 1 || t > 16) t = 1;
    pthread_t tid[8 * 16];
    struct each_arg args[8 * 16];
    int n = 0;
    for (int m = 0; m < n_modules; m++) {
        each_fn f = (each_fn)dlsym(modules[m], name);
        if (!f) {
            printf("each-missing=%s\n", name);
            return 0;
        }
        for (int i = 0; i < t; i++, n++) {
            args[n] = (struct each_arg){f, r, 0};
            pthread_create(&tid[n], NULL, each_thread, &args[n]);
        }
    }
    long sum = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(tid[i], NULL);
        sum += args[i].result;
    }
    printf("each-sum=%ld\n", sum);
    return 0;
}

/* @memfd:PATH */
static int memfd_step(const char *path) {
    /* The file is read whole and closed first, so the memfd takes the lowest free
     * descriptor, as a plugin loader's usually does. */
    FILE *in = fopen(path, "rb");
    if (!in) return -1;
    static char buf[8 << 20];
    size_t got = fread(buf, 1, sizeof buf, in);
    fclose(in);
    int fd = memfd_create("plugin", MFD_CLOEXEC);
    if (fd < 0 || write(fd, buf, got) != (ssize_t)got) return -1;
    char name[64];
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    printf("memfd-plugin=%s\n", h && dlsym(h, MODULE_ENTRY) ? "ok" : "MISSING");
    return 0;
}

static const char *churned;

static void *churn(void *arg) {
    (void)arg;
    while (!stop) {
        void *h = dlopen(churned, RTLD_NOW | RTLD_LOCAL);
        if (h) dlclose(h);
    }
    return NULL;
}

static void fork_churn(const char *arg) {
    char path[1024];
    const char *colon = strrchr(arg, ':');
    if (!colon) { fprintf(stderr, "bad @fork-churn\n"); exit(2); }
    snprintf(path, sizeof path, "%.*s", (int)(colon - arg), arg);
    churned = path;
    int n = atoi(colon + 1), hung = 0, bad = 0;
    pthread_t t;
    stop = 0;
    pthread_create(&t, NULL, churn, NULL);
    for (int c = 0; c < n; c++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) _exit(linear(64, 8, 32, 0, 0) != 0);
        int done = 0, st = 0;
        for (int w = 0; w < 3000 && !done; w++) {
            if (waitpid(pid, &st, WNOHANG) == pid) done = 1;
            else usleep(1000);
        }
        if (!done) { hung++; kill(pid, SIGKILL); waitpid(pid, NULL, 0); }
        else bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("churn-hung=%d churn-bad=%d\n", hung, bad);
}

static int life_step(const char *a) {
    pthread_t tid[64];
    if (!strncmp(a, "@fork-churn:", 12)) {
        fork_churn(a + 12);
        return 0;
    }
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
        vfork_fail();
    } else if (!strncmp(a, "@threads:", 9)) {
        int t = atoi(a + 9);
        const char *n = strchr(a + 9, ':');
        per_thread = n ? atoi(n + 1) : 1;
        for (int i = 0; i < t && i < 64; i++) pthread_create(&tid[i], NULL, repeat_calls, NULL);
        for (int i = 0; i < t && i < 64; i++) pthread_join(tid[i], NULL);
    } else if (!strncmp(a, "@repeat:", 8)) {
        long reps = atol(a + 8), n = 0, m = 0, k = 0, misalign = 0, failed = 0;
        unsigned long ws = 0;
        const char *call = strchr(a + 8, ':');
        if (!call || sscanf(call + 1, "%ld,%ld,%ld,%lu,%ld", &n, &m, &k, &ws, &misalign) < 3) return -1;
        for (long i = 0; i < reps; i++) failed += linear(n, m, k, ws, (int)misalign) != 0;
        printf("repeat-failed=%ld\n", failed);
    } else if (!strncmp(a, "@until:", 7) || !strncmp(a, "@for:", 5)) {
        int until = a[1] == 'u';
        const char *rest = a + (until ? 7 : 5), *call = strrchr(rest, ':');
        char path[1024];
        if (!call) return -1;
        snprintf(path, sizeof path, "%.*s", (int)(call - rest), rest);
        if (call_loop(until ? path : NULL, until ? 120000 : atol(rest), call + 1, "") != 0) return -1;
    } else if (!strncmp(a, "@hold:", 6)) {
        if (hold_step(a + 6) != 0) return -1;
    } else if (!strcmp(a, "@join")) {
        join_step();
    } else if (!strncmp(a, "@plant:", 7)) {
        char dir[512], path[1024];
        const char *colon = strchr(a + 7, ':');
        if (!colon) return -1;
        snprintf(dir, sizeof dir, "%.*s", (int)(colon - (a + 7)), a + 7);
        const char *suffixes[] = {".csv", ".counts.csv"};
        for (int k = 0; k < 2; k++) {
            plant_path(path, sizeof path, dir, MISS_TAG, suffixes[k]);
            if (symlink(colon + 1, path) != 0) { perror(HOST_NAME ": symlink"); return -1; }
        }
    } else if (!strncmp(a, "@link:", 6) || !strncmp(a, "@fifo:", 6)) {
        char dir[512], path[1024];
        const char *colon = strchr(a + 6, ':');
        snprintf(dir, sizeof dir, "%.*s", colon ? (int)(colon - (a + 6)) : (int)strlen(a + 6), a + 6);
        plant_path(path, sizeof path, dir, MISS_TAG, ".csv");
        int r = a[1] == 'l' ? (colon ? link(colon + 1, path) : -1) : mkfifo(path, 0600);
        if (r != 0) { perror(HOST_NAME ": plant"); return -1; }
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
        if (open_module(a + 8) != 0) return -1;
    } else if (!strncmp(a, "@each:", 6)) {
        if (each_step(a + 6) != 0) return -1;
    } else if (!strncmp(a, "@memfd:", 7)) {
        if (memfd_step(a + 7) != 0) return -1;
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
        fprintf(stderr, "usage: " HOST_NAME " MODULE CALL...\n");
        return 2;
    }
    if (!strcmp(argv[1], "-")) {
        typedef int (*matmul_fn)(void *, void *, const void *, const void *, void *, const void *, void *,
                                 const void *, const void *, void *, void *, void *, const void *, void *,
                                 size_t, void *);
        matmul_fn f = (matmul_fn)dlsym(RTLD_DEFAULT, MATMUL_ENTRY);
        if (f) printf("early=%d\n", f(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                         NULL, NULL, 0, NULL));
        else printf("early=absent\n");
        fflush(stdout);
    } else if (open_module(argv[1]) != 0) {
        return 2;
    }
    int (*serving)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, SERVING_ENTRY);
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
