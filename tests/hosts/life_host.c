/* life_host: hosts the way production processes live and die, for the lifecycle tests
 * (tests/reliability/life.rs). Linked against librocblas.so.N like gemm_host; the steps run
 * in order. Every GEMM here is an f32 gemm_ex with m = k = 2 on buffers allocated up front,
 * so the host itself makes no allocation while GEMMs run (what it does in a signal handler
 * is then safe without the interposer, and any hang is the interposer's).
 *
 * usage: life_host STEP...
 *   @storm:T:N       T threads make new missed shapes without pause while the main thread
 *                    forks N children one after another; each child makes one new missed
 *                    GEMM and leaves (_exit for even children, exit for odd); a child not
 *                    gone within 10 s is killed. Prints storm-hung=H
 *   @sigexit:T:MODE  a SIGTERM handler that calls _exit(7) (MODE _exit), exit(7) (exit) or
 *                    _Exit(7) (Exit); T threads make new misses; after 100 ms the process
 *                    sends itself SIGTERM and waits
 *   @siggemm:MS      a SIGALRM handler makes a GEMM (a new shape every 4th signal), every
 *                    200 us, while the main thread makes new misses for MS milliseconds.
 *                    Prints siggemm=<GEMMs made in the handler>
 *   @cancel:N        N times: a thread making new missed shapes without pause (with a
 *                    pthread_testcancel between GEMMs) is cancelled (deferred) and joined.
 *                    Prints cancelled=N
 *   @as-limit:KB     caps the address space (RLIMIT_AS) at what the process maps now plus
 *                    KB KiB, as `ulimit -v` or a server capping itself does: an allocation
 *                    past it fails (prints as-limit=<bytes>)
 *   @fsize-limit:B   caps the size of any file written (RLIMIT_FSIZE, `ulimit -f`) at B
 *                    bytes, SIGXFSZ left at its default action (the process ends)
 *   @umask:OCT       umask(OCT), as a host that takes every bit away (0777)
 *   @own-signals:S:N a thread sends the main thread its own SIGXFSZ (S xfsz) or SIGPIPE
 *                    (S pipe) one at a time, each counted by a handler before the next,
 *                    while the main thread makes N new missed shapes (each written to the
 *                    miss log). Prints own-signals sent=S lost=L (not counted within 2 s)
 *   @chroot:DIR      chroot(DIR) and chdir("/"), as a sandboxed worker confines itself after
 *                    start-up. Prints chroot=ok, or chroot=denied where it may not
 *   @distinct:N      N distinct missed shapes, once each. Prints distinct=N
 *   @repeat:N:R      shape number N (as @distinct numbers them) R more times
 *   @atexit-gemm     registers an exit handler (before any GEMM, so it runs after the
 *                    interposer's) that makes a GEMM of a shape of its own
 *   @chdir:DIR       chdir(DIR)
 *   @sleep:MS        sleep
 *   @pid             prints pid=<this process's pid>
 *   @wait-file:PATH  waits until PATH exists (polling every 10 ms; at most 120 s, then
 *                    prints wait-file=timeout): a test holds the host alive while it looks
 *   @fork-gemm:N:R   forks a child that makes R GEMMs of n = N and leaves by exit(0); waits
 *                    for it. Prints child=<pid>
 *   @exit-group      the raw exit_group system call (no libc exit path at all)
 *   @quick-exit      quick_exit(0)
 *   @Exit            _Exit(0)
 *   @exec:PATH       execv(PATH, {PATH}) (returns only if it fails)
 *   @gemm:N          one GEMM of n = N (m = k = 2). Prints status=S
 *   @handle-on:D     make the handle on device D (hipSetDevice), then set device 0 again:
 *                    later GEMMs run on D's handle from a thread whose current device is 0
 *   @null-alpha:N    the same with alpha = NULL (the caller's mistake). Prints status=S
 *   @null-handle:N   the same on a NULL handle (as after a failed create_handle). Prints
 *                    status=S
 *   @altexit:B:MODE  a SIGTERM handler on a guarded alternate signal stack of B bytes (a
 *                    PROT_NONE page below it; `min+N`: N bytes more than this CPU's signal
 *                    frame needs, sysconf(_SC_MINSIGSTKSZ)), raised at once; MODE _exit, exit or Exit as
 *                    @sigexit, or `measure`: the handler first runs the interposer's whole
 *                    exit path and returns from it (an exec that fails), prints
 *                    altstack-used=<bytes of the alternate stack ever touched>, then _exit(7)
 *   @thread-exit:B   a thread with a stack of B bytes calls _exit(7)
 *   @start-signal:N  the process's first GEMM (n = N, so the interposer's start-up), with a
 *                    signal raised on the starting thread at the end of that start-up (inside
 *                    its at_quick_exit registration, which this host interposes): a second
 *                    thread is let go there to make a GEMM of n = N + 1, and 100 ms later the
 *                    SIGUSR2 handler makes one of n = N + 2. Prints start-signal=<the
 *                    handler's status>
 *   @alt-gemm:B      the process's first GEMM (n = 9) made in a SIGUSR2 handler on a guarded
 *                    alternate signal stack of B bytes (as @altexit). Prints alt-gemm=<status>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void *rocblas_handle;
int rocblas_create_handle(rocblas_handle *);
int hipSetDevice(int);
int rocblas_gemm_ex(rocblas_handle, int, int, int, int, int, const void *, const void *, int, int,
                    const void *, int, int, const void *, const void *, int, int, void *, int, int, int,
                    int, int32_t, uint32_t);
enum { OP_N = 111, F32 = 151 };

#define MAXN 4096
static float A[2 * 2], B[2 * MAXN], C[2 * MAXN];
static rocblas_handle H;

/* One f32 GEMM of m = k = 2 and this n (1..MAXN), on the shared buffers. */
static int gemm_on(rocblas_handle h, int n, float *c) {
    static const float one = 1.0f, zero = 0.0f;
    return rocblas_gemm_ex(h, OP_N, OP_N, 2, n, 2, &one, A, F32, 2, B, F32, 2, &zero, c, F32, 2, c, F32, 2, F32,
                           0, 0, 0);
}

static int gemm(int n) { return gemm_on(H, n, C); }

/* Shapes beyond MAXN: m varies too, so every number names its own shape. */
static int gemm_number(long i) {
    static const float one = 1.0f, zero = 0.0f;
    int n = (int)(i % MAXN) + 1, m = 2 + (int)(i / MAXN);
    static float big[64 * MAXN];
    if (m > 64) return -1;
    return rocblas_gemm_ex(H, OP_N, OP_N, m, n, 1, &one, big, F32, m, B, F32, 1, &zero, big, F32, m, big, F32, m,
                           F32, 0, 0, 0);
}

static volatile int stop;

struct worker { int id; rocblas_handle h; float c[2 * MAXN]; };

static void *misser(void *p) {
    struct worker *w = p;
    for (unsigned i = 0; !stop; i++) gemm_on(w->h, 1 + (int)((w->id * 997 + i) % MAXN), w->c);
    return NULL;
}

static pthread_t start_missers(int t, struct worker *w, pthread_t *tid) {
    for (int i = 0; i < t; i++) {
        w[i].id = i;
        rocblas_create_handle(&w[i].h);
        pthread_create(&tid[i], NULL, misser, &w[i]);
    }
    return 0;
}

static void storm(int t, int n) {
    struct worker *w = calloc(64, sizeof *w);
    pthread_t tid[64];
    stop = 0;
    start_missers(t, w, tid);
    int hung = 0;
    for (int c = 0; c < n; c++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            gemm(MAXN - c);
            if (c % 2 == 0) _exit(0);
            exit(0);
        }
        int done = 0;
        for (int waited = 0; waited < 10000 && !done; waited++) {
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) done = 1;
            else usleep(1000);
        }
        if (!done) {
            hung++;
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
    }
    stop = 1;
    for (int i = 0; i < t; i++) pthread_join(tid[i], NULL);
    printf("storm-hung=%d\n", hung);
    fflush(stdout);
}

static int exit_mode;
static void on_term(int sig) {
    (void)sig;
    if (exit_mode == 0) _exit(7);
    if (exit_mode == 1) exit(7);
    _Exit(7);
}

static unsigned char *alt_base;
static size_t alt_size;
static void on_term_measure(int sig) {
    (void)sig;
    volatile unsigned char here = 0;
    size_t entry = (size_t)(alt_base + alt_size - (unsigned char *)&here);
    char *argv[] = {"/nonexistent/tunedblas-life-host", NULL};
    execv(argv[0], argv); /* fails: the interposer has run its exit path and goes on */
    size_t untouched = 0;
    while (untouched < alt_size && alt_base[untouched] == 0xA5) untouched++;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "altstack-used=%zu entry=%zu\n", alt_size - untouched, entry);
    if (write(1, buf, (size_t)n) < 0) _exit(8);
    _exit(7);
}

static void altexit(size_t bytes, const char *mode) {
    long page = sysconf(_SC_PAGESIZE);
    size_t below = (size_t)page;
    unsigned char *m = mmap(NULL, below + bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, below, PROT_NONE) != 0) _exit(3);
    alt_base = m + below;
    alt_size = bytes;
    memset(alt_base, 0xA5, bytes);
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = alt_base;
    ss.ss_size = bytes;
    if (sigaltstack(&ss, NULL) != 0) { perror("life_host: sigaltstack"); _exit(4); }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    exit_mode = !strcmp(mode, "_exit") ? 0 : !strcmp(mode, "exit") ? 1 : 2;
    sa.sa_handler = !strcmp(mode, "measure") ? on_term_measure : on_term;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGTERM, &sa, NULL);
    fflush(stdout);
    raise(SIGTERM);
    for (;;) pause();
}

static void *exit_from_thread(void *p) {
    (void)p;
    _exit(7);
}

static void thread_exit(size_t bytes) {
    pthread_attr_t at;
    pthread_attr_init(&at);
    if (pthread_attr_setstacksize(&at, bytes) != 0) _exit(3);
    pthread_t t;
    fflush(stdout);
    if (pthread_create(&t, &at, exit_from_thread, NULL) != 0) _exit(4);
    for (;;) pause();
}

static void sigexit(int t, const char *mode) {
    exit_mode = !strcmp(mode, "_exit") ? 0 : !strcmp(mode, "exit") ? 1 : 2;
    signal(SIGTERM, on_term);
    struct worker *w = calloc(64, sizeof *w);
    pthread_t tid[64];
    stop = 0;
    start_missers(t, w, tid);
    usleep(100000);
    kill(getpid(), SIGTERM);
    for (;;) pause();
}

static volatile int handler_gemms, alarms;
static float handler_c[2 * MAXN];
static void on_alarm(int sig) {
    (void)sig;
    int k = ++alarms;
    /* A repeat of one shape most of the time, a new one every 4th signal. */
    gemm_on(H, (k % 4 == 0) ? 1 + (k / 4) % MAXN : 7, handler_c);
    handler_gemms++;
}

static void siggemm(int ms) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0;; i++) {
        gemm(1 + (int)(i * 7 % MAXN));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= ms) break;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN);
    printf("siggemm=%d\n", handler_gemms);
    fflush(stdout);
}

static void *cancellable(void *p) {
    struct worker *w = p;
    pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
    for (unsigned i = 0;; i++) {
        gemm_on(w->h, 1 + (int)((w->id * 131 + i) % MAXN), w->c);
        pthread_testcancel(); /* the host's own cancellation point, between GEMMs */
    }
    return NULL;
}

static void cancel(int n) {
    struct worker *w = calloc(1, sizeof *w);
    rocblas_create_handle(&w->h);
    int done = 0;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        w->id = i;
        pthread_create(&t, NULL, cancellable, w);
        usleep(5000);
        pthread_cancel(t);
        void *r;
        pthread_join(t, &r);
        if (r == PTHREAD_CANCELED) done++;
    }
    printf("cancelled=%d\n", done);
    fflush(stdout);
}

/* @start-signal: the interposer registers its quick_exit handler as the last step of its
 * start-up (lifecycle::started), on the thread that starts it; this host's definition (exported,
 * so it comes first) lets the signal and the second thread go there, once, and forwards. */
static volatile int start_armed, start_go, start_handler_status = -99;
static volatile sig_atomic_t own_got;
static volatile int own_done;
static pthread_t own_main;
static int own_sig;
static void on_own(int sig) { (void)sig; own_got++; }
static void *own_sender(void *p) {
    long *lost = p;
    long sent = 0;
    while (!own_done) {
        int before = own_got;
        pthread_kill(own_main, own_sig);
        sent++;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            if (own_got != before) break;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) > 2000000000L) {
                lost[0]++;
                break;
            }
        }
        usleep(50);
    }
    lost[1] = sent;
    return 0;
}
static void own_signals(const char *which, long n) {
    own_sig = !strcmp(which, "pipe") ? SIGPIPE : SIGXFSZ;
    signal(own_sig, on_own);
    own_main = pthread_self();
    long counts[2] = {0, 0};
    pthread_t b;
    pthread_create(&b, 0, own_sender, counts);
    for (long k = 0; k < n; k++) gemm_number(100000 + k);
    usleep(300000); /* the main thread idle, unblocked: anything pending arrives now */
    own_done = 1;
    pthread_join(b, 0);
    printf("own-signals sent=%ld lost=%ld\n", counts[1], counts[0]);
}

static int start_n;
static float start_c[2 * MAXN];

int __cxa_at_quick_exit(void (*f)(void *), void *d) {
    int (*real)(void (*)(void *), void *) = (int (*)(void (*)(void *), void *))dlsym(RTLD_NEXT, "__cxa_at_quick_exit");
    if (start_armed) {
        start_armed = 0;
        start_go = 1;
        usleep(100000); /* the second thread is waiting for this start-up by now */
        raise(SIGUSR2);
    }
    return real ? real(f, d) : -1;
}

static void on_start_signal(int sig) {
    (void)sig;
    start_handler_status = gemm_on(H, start_n + 2, handler_c);
}

static void *start_racer(void *p) {
    struct worker *w = p;
    while (!start_go) usleep(100);
    gemm_on(w->h, start_n + 1, w->c);
    return NULL;
}

static void start_signal(int n) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_start_signal;
    sigaction(SIGUSR2, &sa, NULL);
    struct worker *w = calloc(1, sizeof *w);
    rocblas_create_handle(&w->h);
    pthread_t t;
    start_n = n;
    start_armed = 1;
    pthread_create(&t, NULL, start_racer, w);
    gemm(n);
    start_go = 1;
    pthread_join(t, NULL);
    printf("start-signal=%d\n", start_handler_status);
    fflush(stdout);
}

static volatile int alt_status = -99;
static void on_alt_gemm(int sig) {
    (void)sig;
    alt_status = gemm_on(H, 9, handler_c);
}

static void alt_gemm(size_t bytes) {
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *m = mmap(NULL, (size_t)page + bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, (size_t)page, PROT_NONE) != 0) _exit(3);
    stack_t ss, off;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = m + page;
    ss.ss_size = bytes;
    if (sigaltstack(&ss, NULL) != 0) { perror("life_host: sigaltstack"); _exit(4); }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alt_gemm;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR2, &sa, NULL);
    raise(SIGUSR2);
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, NULL);
    printf("alt-gemm=%d\n", alt_status);
    fflush(stdout);
}

static void late_gemm(void) { gemm(MAXN - 1); }

int main(int argc, char **argv) {
    for (int i = 0; i < 4; i++) A[i] = 1.0f;
    for (int i = 0; i < 2 * MAXN; i++) B[i] = (float)(i % 7);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int have_handle = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "@handle-on:", 11)) {
            hipSetDevice(atoi(a + 11));
            rocblas_create_handle(&H);
            hipSetDevice(0);
            have_handle = 1;
            continue;
        }
        if (strcmp(a, "@atexit-gemm") && !have_handle) {
            rocblas_create_handle(&H);
            have_handle = 1;
        }
        if (!strncmp(a, "@storm:", 7)) {
            int t = atoi(a + 7);
            const char *n = strchr(a + 7, ':');
            storm(t, n ? atoi(n + 1) : 10);
        } else if (!strncmp(a, "@altexit:", 9)) {
            const char *colon = strchr(a + 9, ':');
            size_t b = !strncmp(a + 9, "min+", 4) ? (size_t)sysconf(_SC_MINSIGSTKSZ) + (size_t)atol(a + 13)
                                                  : (size_t)atol(a + 9);
            altexit(b, colon ? colon + 1 : "_exit");
        } else if (!strncmp(a, "@start-signal:", 14)) {
            start_signal(atoi(a + 14));
        } else if (!strncmp(a, "@alt-gemm:", 10)) {
            alt_gemm((size_t)atol(a + 10));
        } else if (!strncmp(a, "@thread-exit:", 13)) {
            thread_exit((size_t)atol(a + 13));
        } else if (!strncmp(a, "@sigexit:", 9)) {
            const char *mode = strchr(a + 9, ':');
            sigexit(atoi(a + 9), mode ? mode + 1 : "_exit");
        } else if (!strncmp(a, "@siggemm:", 9)) {
            siggemm(atoi(a + 9));
        } else if (!strncmp(a, "@cancel:", 8)) {
            cancel(atoi(a + 8));
        } else if (!strncmp(a, "@as-limit:", 10)) {
            FILE *f = fopen("/proc/self/status", "r");
            char line[256];
            unsigned long kb = 0;
            while (f && fgets(line, sizeof line, f))
                if (!strncmp(line, "VmSize:", 7)) kb = strtoul(line + 7, NULL, 10);
            if (f) fclose(f);
            struct rlimit r = {(kb + strtoul(a + 10, NULL, 10)) * 1024, RLIM_INFINITY};
            if (!kb || setrlimit(RLIMIT_AS, &r) != 0) { perror("life_host: as-limit"); return 3; }
            printf("as-limit=%lu\n", (unsigned long)r.rlim_cur);
        } else if (!strncmp(a, "@fsize-limit:", 13)) {
            struct rlimit r = {strtoul(a + 13, NULL, 10), RLIM_INFINITY};
            if (setrlimit(RLIMIT_FSIZE, &r) != 0) { perror("life_host: fsize-limit"); return 3; }
        } else if (!strncmp(a, "@own-signals:", 13)) {
            const char *n = strchr(a + 13, ':');
            char which[8] = {0};
            strncpy(which, a + 13, n && n - (a + 13) < 7 ? (size_t)(n - (a + 13)) : 4);
            own_signals(which, n ? atol(n + 1) : 200);
        } else if (!strncmp(a, "@umask:", 7)) {
            umask((mode_t)strtoul(a + 7, NULL, 8));
        } else if (!strncmp(a, "@chroot:", 8)) {
            int ok = chroot(a + 8) == 0 && chdir("/") == 0;
            printf("chroot=%s\n", ok ? "ok" : "denied");
            fflush(stdout);
        } else if (!strncmp(a, "@distinct:", 10)) {
            long n = atol(a + 10), bad = 0;
            for (long k = 0; k < n; k++) bad += gemm_number(k) != 0;
            printf("distinct=%ld failed=%ld\n", n, bad);
        } else if (!strncmp(a, "@repeat:", 8)) {
            long n = atol(a + 8);
            const char *r = strchr(a + 8, ':');
            for (long k = 0, reps = r ? atol(r + 1) : 1; k < reps; k++) gemm_number(n);
        } else if (!strcmp(a, "@atexit-gemm")) {
            atexit(late_gemm);
        } else if (!strncmp(a, "@chdir:", 7)) {
            if (chdir(a + 7) != 0) { perror("life_host: chdir"); return 3; }
        } else if (!strncmp(a, "@sleep:", 7)) {
            usleep(atoi(a + 7) * 1000);
        } else if (!strcmp(a, "@pid")) {
            printf("pid=%d\n", (int)getpid());
        } else if (!strncmp(a, "@wait-file:", 11)) {
            int waited = 0;
            while (access(a + 11, F_OK) != 0 && waited < 12000) {
                usleep(10000);
                waited++;
            }
            if (waited >= 12000) printf("wait-file=timeout\n");
        } else if (!strncmp(a, "@fork-gemm:", 11)) {
            const char *r = strchr(a + 11, ':');
            int n = atoi(a + 11), reps = r ? atoi(r + 1) : 1;
            pid_t pid = fork();
            if (pid == 0) {
                for (int k = 0; k < reps; k++) gemm(n);
                exit(0);
            }
            waitpid(pid, NULL, 0);
            printf("child=%d\n", (int)pid);
        } else if (!strcmp(a, "@exit-group")) {
            syscall(SYS_exit_group, 0);
        } else if (!strcmp(a, "@quick-exit")) {
            quick_exit(0);
        } else if (!strcmp(a, "@Exit")) {
            _Exit(0);
        } else if (!strncmp(a, "@exec:", 6)) {
            char *args[] = {(char *)a + 6, NULL};
            execv(a + 6, args);
            printf("exec-failed=%d\n", errno);
        } else if (!strncmp(a, "@null-alpha:", 12)) {
            static const float zero = 0.0f;
            printf("status=%d\n", rocblas_gemm_ex(H, OP_N, OP_N, 2, atoi(a + 12), 2, NULL, A, F32, 2, B, F32, 2, &zero,
                                                  C, F32, 2, C, F32, 2, F32, 0, 0, 0));
        } else if (!strncmp(a, "@null-handle:", 13)) {
            printf("status=%d\n", gemm_on(NULL, atoi(a + 13), C));
        } else if (!strncmp(a, "@gemm:", 6)) {
            printf("status=%d\n", gemm(atoi(a + 6)));
        } else {
            fprintf(stderr, "life_host: unknown step %s\n", a);
            return 2;
        }
    }
    return 0;
}
