/* The footprint hosts' module (tests/footprint.rs): built once per backend and loaded with
 * RTLD_LOCAL by footprint_host.c or footprint_host.py, as PyTorch's BLAS libraries are.
 *   -DFP_ROCBLAS    linked against librocblas: an f32 rocblas_gemm_ex, NN, packed (the key
 *                   of gemm_host's spec ex:NN:s:M:N:K), a handle made and destroyed per call
 *   -DFP_CUBLASLT   linked against libcublasLt: a bf16 F.linear(x[N,K], W[M,K]) as PyTorch's
 *   -DFP_HIPBLASLT  linked against libhipblaslt:   cuBLASLt / hipBLASLt path does it
 * The Lt calls make and destroy their matmul descriptor, layouts and preference around every
 * call, as PyTorch does; after each destroy a block of the object's size is taken and kept,
 * so the next call's objects get new addresses, as they do in a long-running PyTorch process
 * whose heap moves on (here the allocator would hand the same few addresses out again).
 *
 * Exports fp_step(const char *step), run once per host argument:
 *   M,N,K            one GEMM of that shape (a "miss" unless the profile has its row)
 *   repeat:C:M,N,K   C GEMMs of that shape          distinct:C   C GEMMs of new shapes
 *   dump:LABEL       footprint_dump() and this module's own lines into $FOOTPRINT_OUT/ROLE.LABEL
 *   role:NAME        the name dumps are filed under ("main" at start)
 *   note:TEXT        a line for the next dumps
 *   fork | fork-gemm fork; the child (fp_child) dumps, makes a GEMM of a new shape or not, and
 *                    leaves with exit(0); the parent waits (20 s at most) and notes its status
 *   close-from:N     close_range(N, ~0U, 0), as daemons do
 *   devnull3         three opens of /dev/null, noting the descriptors they got
 *   own:NAME         opens NAME (created, truncated), notes its descriptor, writes one line
 *   dup-own:NAME:FD  the same, then dup2 onto FD (and the first descriptor closed)
 *   check:NAME       notes NAME's size and bytes (the test compares them with the plain run)
 *   print:T|eprint:T T and a newline on stdout | stderr
 *   altstack:SIZE    dumps "before-exit"; SIGTERM's handler _exit(7)s on an alternate stack of SIZE bytes (0:
 *                    sysconf(_SC_SIGSTKSZ)) with a PROT_NONE guard page below; raises SIGTERM
 *   thread-exit:SIZE dumps "before-exit"; a thread with a SIZE-byte stack calls _exit(7)
 *   unshare          unshare(CLONE_NEWUSER), noting how it went
 *   umask:OCTAL | nofile:N (RLIMIT_NOFILE soft limit) | block-all (every signal blocked)
 *   cwd-gone         chdir into a new folder, then remove it
 *   alarm:USEC       SIGALRM every USEC microseconds, its handler without SA_RESTART (so the
 *                    interposer's system calls see EINTR)
 * Every library call is made with errno set to a sentinel; a call that succeeds yet changes
 * errno is counted, and the dumps say so. Every dump also lists the GEMMs made and shapes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>

#include "footprint.h"

#define SENTINEL 4242
static int errno_changes;
static char errno_first[96];
static void errno_check(const char *call, int st) {
    if (st == 0 && errno != SENTINEL && errno_changes++ == 0)
        snprintf(errno_first, sizeof errno_first, "%s errno=%d", call, errno);
}
/* st = call, with errno set to the sentinel before and checked after. */
#define CHECKED(st, name, call) \
    do {                        \
        errno = SENTINEL;       \
        st = (call);            \
        errno_check(name, st);  \
    } while (0)

static char *buffer; /* inputs and outputs, 16-byte aligned, 4 MiB */

#if defined(FP_ROCBLAS)
typedef void *rocblas_handle;
int rocblas_create_handle(rocblas_handle *);
int rocblas_destroy_handle(rocblas_handle);
int rocblas_gemm_ex(rocblas_handle, int, int, int, int, int, const void *, const void *, int, int, const void *,
                    int, int, const void *, const void *, int, int, void *, int, int, int, int, int32_t, uint32_t);
static int backend_gemm(long m, long n, long k) {
    enum { OP_N = 111, F32 = 151 };
    rocblas_handle h;
    int st;
    CHECKED(st, "rocblas_create_handle", rocblas_create_handle(&h));
    if (st != 0) return st;
    float alpha = 1, beta = 0.5f, *a = (float *)buffer, *b = a + m * k, *c = b + k * n;
    CHECKED(st, "rocblas_gemm_ex",
            rocblas_gemm_ex(h, OP_N, OP_N, m, n, k, &alpha, a, F32, m, b, F32, k, &beta, c, F32, m, c, F32, m, F32,
                            0, 0, 0));
    int st2;
    CHECKED(st2, "rocblas_destroy_handle", rocblas_destroy_handle(h));
    return st ? st : st2;
}
#elif defined(FP_CUBLASLT) || defined(FP_HIPBLASLT)
#if defined(FP_CUBLASLT)
#define LT(name) cublasLt##name
enum { COMPUTE_32F = 68, TRANSA = 3, TRANSB = 4, OP_N = 0, OP_T = 1 };
typedef struct { uint64_t data[8]; } Algo;
#else
#define LT(name) hipblasLt##name
enum { COMPUTE_32F = 2, TRANSA = 0, TRANSB = 1, OP_N = 111, OP_T = 112 };
typedef struct { uint8_t data[16]; size_t max_workspace_bytes; } Algo;
#endif
enum { R_32F = 0, R_16BF = 14, PREF_MAX_WORKSPACE_BYTES = 1 };
typedef struct { Algo algo; size_t workspace; int32_t state; float waves; int32_t reserved[4]; } Result;
int LT(Create)(void **h);
int LT(MatmulDescCreate)(void **d, int32_t compute, int32_t scale);
int LT(MatmulDescDestroy)(void *d);
int LT(MatmulDescSetAttribute)(void *d, int attr, const void *buf, size_t size);
int LT(MatrixLayoutCreate)(void **l, int32_t type, uint64_t rows, uint64_t cols, int64_t ld);
int LT(MatrixLayoutDestroy)(void *l);
int LT(MatmulPreferenceCreate)(void **p);
int LT(MatmulPreferenceDestroy)(void *p);
int LT(MatmulPreferenceSetAttribute)(void *p, int attr, const void *buf, size_t size);
int LT(MatmulAlgoGetHeuristic)(void *h, void *d, void *A, void *B, void *C, void *D, void *p, int requested,
                               Result *out, int *returned);
int LT(Matmul)(void *h, void *desc, const void *alpha, const void *A, void *Ad, const void *B, void *Bd,
               const void *beta, const void *C, void *Cd, void *D, void *Dd, const Algo *algo, void *ws,
               size_t ws_bytes, void *stream);

static void *handle;

/* Destroys an object, then keeps a block of its size, so that address is not handed out again. */
static int destroy_moving_on(int (*destroy)(void *), void *object, const char *name) {
    size_t size = malloc_usable_size(object);
    int st;
    CHECKED(st, name, destroy(object));
    if (!malloc(size)) return -1;
    return st;
}

static int backend_gemm(long n_out, long tokens, long k) {
    int st, bad = 0;
    if (!handle) {
        CHECKED(st, "Create", LT(Create)(&handle));
        if (st != 0) return st;
    }
    void *desc, *A, *B, *C, *pref;
    int32_t t = OP_T, n = OP_N;
    uint64_t ws = 0;
    CHECKED(st, "MatmulDescCreate", LT(MatmulDescCreate)(&desc, COMPUTE_32F, R_32F));
    bad |= st;
    CHECKED(st, "MatmulDescSetAttribute", LT(MatmulDescSetAttribute)(desc, TRANSA, &t, 4));
    bad |= st;
    CHECKED(st, "MatmulDescSetAttribute", LT(MatmulDescSetAttribute)(desc, TRANSB, &n, 4));
    bad |= st;
    CHECKED(st, "MatrixLayoutCreate", LT(MatrixLayoutCreate)(&A, R_16BF, k, n_out, k));
    bad |= st;
    CHECKED(st, "MatrixLayoutCreate", LT(MatrixLayoutCreate)(&B, R_16BF, k, tokens, k));
    bad |= st;
    CHECKED(st, "MatrixLayoutCreate", LT(MatrixLayoutCreate)(&C, R_16BF, n_out, tokens, n_out));
    bad |= st;
    CHECKED(st, "MatmulPreferenceCreate", LT(MatmulPreferenceCreate)(&pref));
    bad |= st;
    CHECKED(st, "MatmulPreferenceSetAttribute",
            LT(MatmulPreferenceSetAttribute)(pref, PREF_MAX_WORKSPACE_BYTES, &ws, 8));
    bad |= st;
    Result r;
    int returned = 0;
    CHECKED(st, "MatmulAlgoGetHeuristic", LT(MatmulAlgoGetHeuristic)(handle, desc, A, B, C, C, pref, 1, &r, &returned));
    bad |= st || returned != 1;
    if (!bad) {
        float alpha = 1, beta = 0;
        CHECKED(st, "Matmul",
                LT(Matmul)(handle, desc, &alpha, buffer, A, buffer + (1 << 20), B, &beta, buffer + (2 << 20), C,
                           buffer + (2 << 20), C, &r.algo, NULL, 0, NULL));
        bad |= st;
    }
    bad |= destroy_moving_on(LT(MatmulPreferenceDestroy), pref, "MatmulPreferenceDestroy");
    bad |= destroy_moving_on(LT(MatrixLayoutDestroy), A, "MatrixLayoutDestroy");
    bad |= destroy_moving_on(LT(MatrixLayoutDestroy), B, "MatrixLayoutDestroy");
    bad |= destroy_moving_on(LT(MatrixLayoutDestroy), C, "MatrixLayoutDestroy");
    bad |= destroy_moving_on(LT(MatmulDescDestroy), desc, "MatmulDescDestroy");
    return bad ? (st ? st : -1) : 0;
}
#else
#error "build with -DFP_ROCBLAS, -DFP_CUBLASLT or -DFP_HIPBLASLT"
#endif

/* ---- the steps ---- */

static char role[32] = "main";
static char notes[8192];
static long gemms;
static char shapes[4096];
static int forks;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    size_t len = strlen(notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes + len, sizeof notes - len, fmt, ap);
    va_end(ap);
    len = strlen(notes);
    if (len + 1 < sizeof notes) strcpy(notes + len, "\n");
}

static void dump(const char *label) {
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    if (!mem) return;
    footprint_dump(mem);
    fprintf(mem, "gemms %ld\nshapes%s\nerrno-changed %d %s\n%s", gemms, shapes, errno_changes, errno_first, notes);
    fclose(mem);
    const char *dir = getenv("FOOTPRINT_OUT");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.%s", dir ? dir : ".", role, label);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, text, size) != (ssize_t)size) note("dump %s: short write", label);
        close(fd);
    }
    free(text);
}

static int gemm(long m, long n, long k) {
    char shape[64];
    snprintf(shape, sizeof shape, " %ldx%ldx%ld", m, n, k);
    size_t len = strlen(shape);
    int seen = 0;
    for (const char *p = strstr(shapes, shape); p && !seen; p = strstr(p + 1, shape))
        seen = p[len] == ' ' || p[len] == 0;
    if (!seen && strlen(shapes) + len < sizeof shapes) strcat(shapes, shape);
    int st = backend_gemm(m, n, k);
    if (st != 0) note("gemm %ldx%ldx%ld status=%d", m, n, k, st);
    if (gemms++ == 0) dump("first-gemm");
    return st;
}

static void on_term(int sig) {
    (void)sig;
    _exit(7);
}

static void *exit_thread(void *p) {
    (void)p;
    _exit(7);
}

static void on_alarm(int sig) { (void)sig; }

static int own_open(const char *name) {
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    note("own %s fd=%d%s%s", name, fd, fd < 0 ? " " : "", fd < 0 ? strerror(errno) : "");
    if (fd >= 0 && write(fd, "the host wrote this.\n", 21) != 21) note("own %s: short write", name);
    return fd;
}

/* The child of a fork step: dumps as ROLE fork<N>, with a GEMM of a new shape or none. */
void fp_child(int n, int with_gemm) {
    snprintf(role, sizeof role, "fork%d", n);
    gemms = 0; /* this process's own: the test asks which processes made one */
    dump("start");
    if (with_gemm) gemm(100 + n, 8, 8);
    dump("end");
}

/* Waits for a child at most 20 s (then kills it); notes how it ended. */
static void wait_child(pid_t pid, int n) {
    int status = 0;
    for (int i = 0; i < 2000; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            if (WIFEXITED(status)) note("fork%d exit=%d", n, WEXITSTATUS(status));
            else note("fork%d signal=%d", n, WTERMSIG(status));
            return;
        }
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    note("fork%d hung and was killed", n);
}

int fp_step(const char *a) {
    static int started;
    long x = 0, y = 0, z = 0, c = 0;
    if (!started++) dump("start");
    if (!buffer) buffer = aligned_alloc(256, 4 << 20), memset(buffer, 0, 4 << 20);
    if (sscanf(a, "%ld,%ld,%ld", &x, &y, &z) == 3) {
        gemm(x, y, z);
    } else if (sscanf(a, "repeat:%ld:%ld,%ld,%ld", &c, &x, &y, &z) == 4) {
        for (long i = 0; i < c; i++) gemm(x, y, z);
    } else if (sscanf(a, "distinct:%ld", &c) == 1) {
        for (long i = 0; i < c; i++) gemm(200 + i, 8, 8);
    } else if (!strncmp(a, "dump:", 5)) {
        dump(a + 5);
    } else if (!strncmp(a, "role:", 5)) {
        snprintf(role, sizeof role, "%s", a + 5);
    } else if (!strncmp(a, "note:", 5)) {
        note("%s", a + 5);
    } else if (!strcmp(a, "fork") || !strcmp(a, "fork-gemm")) {
        int n = ++forks;
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            fp_child(n, a[4] == '-');
            exit(0);
        }
        wait_child(pid, n);
    } else if (sscanf(a, "close-from:%ld", &x) == 1) {
        if (syscall(SYS_close_range, (unsigned)x, ~0U, 0) != 0)
            for (int fd = (int)x; fd < 1024; fd++) close(fd);
    } else if (!strcmp(a, "devnull3")) {
        int f0 = open("/dev/null", O_RDWR), f1 = open("/dev/null", O_RDWR), f2 = open("/dev/null", O_RDWR);
        note("devnull fds %d %d %d", f0, f1, f2);
    } else if (!strncmp(a, "own:", 4)) {
        own_open(a + 4);
    } else if (!strncmp(a, "dup-own:", 8)) {
        char name[256];
        if (sscanf(a + 8, "%255[^:]:%ld", name, &x) != 2) return -1;
        int fd = own_open(name);
        if (fd >= 0 && fd != x) {
            note("dup2 onto %ld: %d", x, dup2(fd, (int)x));
            close(fd);
        }
    } else if (!strncmp(a, "check:", 6)) {
        char bytes[160] = {0};
        int fd = open(a + 6, O_RDONLY | O_CLOEXEC);
        ssize_t got = fd >= 0 ? read(fd, bytes, sizeof bytes - 1) : -1;
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) st.st_size = -1;
        if (fd >= 0) close(fd);
        for (ssize_t i = 0; i < got; i++)
            if (bytes[i] < ' ' || bytes[i] > '~') bytes[i] = '.';
        note("check %s: %lld bytes: %s", a + 6, (long long)st.st_size, bytes);
    } else if (!strncmp(a, "print:", 6) || !strncmp(a, "eprint:", 7)) {
        FILE *f = a[0] == 'e' ? stderr : stdout;
        fprintf(f, "%s\n", strchr(a, ':') + 1);
        fflush(f);
    } else if (sscanf(a, "altstack:%ld", &x) == 1) {
        size_t size = x ? (size_t)x : (size_t)sysconf(_SC_SIGSTKSZ), page = (size_t)sysconf(_SC_PAGESIZE);
        size = (size + page - 1) / page * page;
        char *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0) return -1;
        dump("before-exit");
        stack_t ss = {.ss_sp = m + page, .ss_size = size, .ss_flags = 0};
        struct sigaction sa = {.sa_handler = on_term, .sa_flags = SA_ONSTACK};
        if (sigaltstack(&ss, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) return -1;
        fflush(stdout);
        raise(SIGTERM);
        note("SIGTERM returned");
    } else if (sscanf(a, "thread-exit:%ld", &x) == 1) {
        pthread_attr_t attr;
        pthread_t t;
        pthread_attr_init(&attr);
        dump("before-exit");
        int e = pthread_attr_setstacksize(&attr, (size_t)x);
        if (e == 0) e = pthread_create(&t, &attr, exit_thread, NULL);
        if (e != 0) {
            note("no thread of a %ld-byte stack: %s", x, strerror(e));
            return 0;
        }
        fflush(stdout);
        pthread_join(t, NULL);
    } else if (!strcmp(a, "unshare")) {
        int r = unshare(CLONE_NEWUSER);
        note("unshare(CLONE_NEWUSER): %s", r == 0 ? "ok" : strerror(errno));
    } else if (sscanf(a, "umask:%lo", &x) == 1) {
        umask((mode_t)x);
    } else if (sscanf(a, "nofile:%ld", &x) == 1) {
        struct rlimit l;
        getrlimit(RLIMIT_NOFILE, &l);
        l.rlim_cur = (rlim_t)x;
        if (setrlimit(RLIMIT_NOFILE, &l) != 0) return -1;
    } else if (!strcmp(a, "block-all")) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
    } else if (!strcmp(a, "cwd-gone")) {
        if (mkdir("gone", 0700) != 0 || chdir("gone") != 0 || rmdir("../gone") != 0) return -1;
    } else if (sscanf(a, "alarm:%ld", &x) == 1) {
        struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = 0};
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, x}, {0, x}};
        setitimer(ITIMER_REAL, &it, NULL);
    } else {
        fprintf(stderr, "footprint: unknown step %s\n", a);
        return -1;
    }
    return 0;
}
