/* fault_host: gemm_host's GEMM specs plus the process-life events the reliability tests need
 * (fork, vfork, signals, _exit, freeing disk space, planting files). Linked against
 * librocblas.so.N like gemm_host; the steps run in order.
 *
 * usage: fault_host STEP...
 *   SPEC                run it as gemm_host does; print spec=... status=... digest=...
 *   @threads:T:SPEC     run SPEC on T threads at once; print threads=T failures=F
 *   @fork               fork; the child runs the remaining steps and leaves through exit();
 *                       the parent waits, prints child=<wait status>, then runs them too
 *   @forkx              as @fork, but the child leaves with _exit(0) (as multiprocessing
 *                       fork workers do)
 *   @fork-busy:T:SPEC   run SPEC once, then T threads run SPEC (a miss) while the main
 *                       thread forks; the child runs SPEC once and exit()s; the parent
 *                       joins and waits
 *   @fork-init:T:SPEC   as @fork-busy without the first run: the fork comes while the
 *                       threads' first calls are still starting the interposer up
 *   @vfork-fail         vfork, exec a path that does not exist, _exit(127) in the child
 *                       (as posix_spawn and Python's subprocess do when exec fails)
 *   @load-racing:PATH:MS:SPEC  a thread runs SPEC (the process's first call: it starts the
 *                       interposer up); MS ms later the main thread dlopens PATH (a module
 *                       whose constructor makes a GEMM, under the loader's lock), then joins;
 *                       print loaded=PATH
 *   @pause              print "paused", flush, and wait for signals forever
 *   @raise:SIG          raise(SIG)
 *   @rm:PATH            unlink(PATH) (a missing file is reported, not fatal)
 *   @plant:DIR:VICTIM   plant (after a first miss), in place of this process's rank-0 miss files in DIR, symlinks to
 *                       VICTIM (log, counts, and the counts temporary)
 *   @fifo:DIR           plant a FIFO under this process's rank-0 miss-log name in DIR
 *   @link:DIR:VICTIM    plant a hard link to VICTIM under that name
 *   @absurd             make GEMM calls with absurd arguments (negative or 2^40 sizes, 2^62
 *                       leading dimensions and strides, bad enums, negative batches) that
 *                       rocBLAS rejects or runs without reading A and B; print absurd=<statuses>
 *   @exit_              _exit(0) now (skips atexit handlers)
 *   @device:D           hipSetDevice(D) on the main thread: later specs run on device D
 *   @until:PATH:SPEC    run SPEC every 20 ms until PATH exists (at most 120 s)
 *   @for:MS:SPEC        run SPEC every 20 ms for MS milliseconds
 *   @wait:PATH          print "waiting" and wait until PATH exists (at most 120 s)
 */
#define GEMM_HOST_MODULE
#include "gemm_host.c"
#include "host_steps.h"
#include "miss_names.h"

#include <ctype.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int rocblas_gemm_strided_batched_ex_64(rocblas_handle, int, int, int64_t, int64_t, int64_t,
                                       const void *, const void *, int, int64_t, int64_t,
                                       const void *, int, int64_t, int64_t, const void *,
                                       const void *, int, int64_t, int64_t, void *, int, int64_t,
                                       int64_t, int64_t, int, int, int32_t, uint32_t);

static void absurd(void) {
    rocblas_handle h;
    float zero = 0.0f, one = 1.0f, buf[64] = {0};
    const int64_t big = (int64_t)1 << 40, huge = (int64_t)1 << 62;
    int st[8], n = 0;
    rocblas_create_handle(&h);
    st[n++] = rocblas_gemm_ex(h, OP_N, OP_N, -1, 8, 8, &one, buf, F32, 8, buf, F32, 8, &zero, buf, F32, 8,
                              buf, F32, 8, F32, 0, 0, 0);
    st[n++] = rocblas_gemm_ex(h, 999, OP_N, 8, 8, 8, &one, buf, F32, 8, buf, F32, 8, &zero, buf, F32, 8, buf,
                              F32, 8, F32, 0, 0, 0);
    st[n++] = rocblas_gemm_ex_64(h, OP_N, OP_N, big, big, big, &one, buf, F32, 1, buf, F32, big, &zero, buf,
                                 F32, big, buf, F32, big, F32, 0, 0, 0);
    st[n++] = rocblas_gemm_ex(h, OP_N, OP_N, 8, 8, 8, &one, buf, F32, 8, buf, F32, 8, &zero, buf, F32, 2, buf,
                              F32, 2, F32, 0, 0, 0);
    st[n++] = rocblas_gemm_strided_batched_ex(h, OP_N, OP_N, 2, 2, 2, &one, buf, F32, 2, 4, buf, F32, 2, 4,
                                              &zero, buf, F32, 2, 4, buf, F32, 2, 4, -3, F32, 0, 0, 0);
    /* Legal but absurd: alpha = beta = 0, so A, B and C are never read. */
    st[n++] = rocblas_gemm_ex_64(h, OP_T, OP_N, 1, 1, big, &zero, buf, F32, big, buf, F32, huge, &zero, buf,
                                 F32, 1, buf, F32, 1, F32, 0, 0, 0);
    st[n++] = rocblas_gemm_strided_batched_ex_64(h, OP_T, OP_N, 1, 1, 1, &zero, buf, F32, 1, huge, buf, F32,
                                                 huge, huge, &zero, buf, F32, 1, huge, buf, F32, 1, 0, 2, F32,
                                                 0, 0, 0);
    st[n++] = rocblas_gemm_ex(h, OP_N, OP_N, 8, 8, 8, &one, buf, 12345, 8, buf, F32, 8, &zero, buf, F32, 8,
                              buf, F32, 8, 54321, 0, 0, 0);
    rocblas_destroy_handle(h);
    printf("absurd=");
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", st[i]);
    printf("\n");
    fflush(stdout);
}

static void run_spec(const char *text) {
    struct spec s;
    uint64_t d = 0;
    if (parse(text, &s) != 0) { fprintf(stderr, "fault_host: bad spec %s\n", text); exit(2); }
    int st = run(&s, &d, 0);
    printf("spec=%s status=%d digest=%016llx\n", s.text, st, (unsigned long long)d);
    fflush(stdout);
}

/* "<host>-<pid>-<start>-rank0" as the interposer names this process's miss files. */

struct busy { struct spec spec; volatile int *stop; int runs; };

static void *busy_worker(void *p) {
    struct busy *b = p;
    while (!*b->stop || b->runs < 3) {
        uint64_t d;
        run(&b->spec, &d, 0);
        b->runs++;
    }
    return NULL;
}

static void fork_busy(const char *arg, int warm) {
    int t = atoi(arg);
    const char *spec = strchr(arg, ':');
    if (t <= 0 || t > 64 || !spec) { fprintf(stderr, "fault_host: bad @fork-busy\n"); exit(2); }
    spec++;
    if (warm) run_spec(spec);
    volatile int stop = 0;
    pthread_t tid[64];
    struct busy b[64];
    for (int i = 0; i < t; i++) {
        b[i].stop = &stop;
        b[i].runs = 0;
        if (parse(spec, &b[i].spec) != 0) exit(2);
        pthread_create(&tid[i], NULL, busy_worker, &b[i]);
    }
    if (warm) usleep(20000);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        run_spec(spec);
        exit(0);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    stop = 1;
    for (int i = 0; i < t; i++) pthread_join(tid[i], NULL);
    printf("child=%d\n", status);
    fflush(stdout);
}

static void *first_call(void *spec) {
    run_spec(spec);
    return NULL;
}

static void load_racing(const char *arg) {
    char path[1024];
    const char *c1 = strchr(arg, ':');
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) { fprintf(stderr, "fault_host: bad @load-racing\n"); exit(2); }
    snprintf(path, sizeof path, "%.*s", (int)(c1 - arg), arg);
    pthread_t t;
    pthread_create(&t, NULL, first_call, (void *)(c2 + 1));
    usleep(1000 * atoi(c1 + 1));
    if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) { fprintf(stderr, "fault_host: %s\n", dlerror()); exit(2); }
    pthread_join(t, NULL);
    printf("loaded=%s\n", path);
    fflush(stdout);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "@threads:", 9)) {
            char *args[4] = {"fault_host", "--threads", NULL, NULL};
            char t[16];
            const char *spec = strchr(a + 9, ':');
            if (!spec) return 2;
            snprintf(t, sizeof t, "%.*s", (int)(spec - (a + 9)), a + 9);
            args[2] = t;
            args[3] = (char *)spec + 1;
            host_main(4, args);
            fflush(stdout);
        } else if (!strcmp(a, "@fork") || !strcmp(a, "@forkx")) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid < 0) return 3;
            if (pid == 0) {
                for (int j = i + 1; j < argc; j++) {
                    if (argv[j][0] == '@') continue; /* the child only runs specs */
                    run_spec(argv[j]);
                }
                fflush(stdout);
                if (!strcmp(a, "@forkx")) _exit(0);
                exit(0);
            }
            int status = -1;
            waitpid(pid, &status, 0);
            printf("child=%d\n", status);
            fflush(stdout);
        } else if (!strncmp(a, "@fork-busy:", 11)) {
            fork_busy(a + 11, 1);
        } else if (!strncmp(a, "@fork-init:", 11)) {
            fork_busy(a + 11, 0);
        } else if (!strcmp(a, "@vfork-fail")) {
            vfork_fail();
            fflush(stdout);
        } else if (!strncmp(a, "@load-racing:", 13)) {
            load_racing(a + 13);
        } else if (!strcmp(a, "@pause")) {
            printf("paused\n");
            fflush(stdout);
            for (;;) pause();
        } else if (!strncmp(a, "@raise:", 7)) {
            fflush(stdout);
            raise(atoi(a + 7));
        } else if (!strncmp(a, "@rm:", 4)) {
            if (unlink(a + 4) != 0) perror("fault_host: unlink"); /* reference runs have none */
        } else if (!strncmp(a, "@plant:", 7)) {
            char dir[512], victim[512], path[1024], tmp[64];
            const char *colon = strchr(a + 7, ':');
            if (!colon) return 2;
            snprintf(dir, sizeof dir, "%.*s", (int)(colon - (a + 7)), a + 7);
            snprintf(victim, sizeof victim, "%s", colon + 1);
            snprintf(tmp, sizeof tmp, ".counts.tmp.%d", (int)getpid());
            const char *suffixes[] = {".csv", ".counts.csv", tmp};
            for (int s = 0; s < 3; s++) {
                plant_path(path, sizeof path, dir, "", suffixes[s]);
                if (symlink(victim, path) != 0) { perror("fault_host: symlink"); return 3; }
            }
        } else if (!strncmp(a, "@fifo:", 6)) {
            char path[1024];
            plant_path(path, sizeof path, a + 6, "", ".csv");
            if (mkfifo(path, 0600) != 0) { perror("fault_host: mkfifo"); return 3; }
        } else if (!strncmp(a, "@link:", 6)) {
            char dir[512], path[1024];
            const char *colon = strchr(a + 6, ':');
            if (!colon) return 2;
            snprintf(dir, sizeof dir, "%.*s", (int)(colon - (a + 6)), a + 6);
            plant_path(path, sizeof path, dir, "", ".csv");
            if (link(colon + 1, path) != 0) { perror("fault_host: link"); return 3; }
        } else if (!strcmp(a, "@absurd")) {
            absurd();
        } else if (!strncmp(a, "@device:", 8)) {
            if (hipSetDevice(atoi(a + 8)) != 0) { fprintf(stderr, "fault_host: hipSetDevice failed\n"); return 2; }
        } else if (!strncmp(a, "@until:", 7) || !strncmp(a, "@for:", 5)) {
            int until = a[1] == 'u';
            const char *rest = a + (until ? 7 : 5);
            /* SPEC itself holds colons: PATH or MS is what comes before the first one */
            const char *colon = strchr(rest, ':');
            if (!colon) return 2;
            char first[1024];
            snprintf(first, sizeof first, "%.*s", (int)(colon - rest), rest);
            long limit_ms = until ? 120000 : atol(first);
            struct stat st;
            for (long waited = 0; waited < limit_ms; waited += 20) {
                if (until && stat(first, &st) == 0) break;
                run_spec(colon + 1);
                usleep(20000);
            }
        } else if (!strncmp(a, "@wait:", 6)) {
            printf("waiting\n");
            fflush(stdout);
            struct stat st;
            for (int waited = 0; waited < 12000 && stat(a + 6, &st) != 0; waited++) usleep(10000);
        } else if (!strcmp(a, "@exit_")) {
            fflush(stdout);
            _exit(0);
        } else {
            run_spec(a);
        }
    }
    fflush(stdout);
    return 0;
}
