/* The footprint observer: everything a host can see of its own process, one fact a line, so
 * that tests/footprint.rs can compare a run with the interposer preloaded against one
 * without it, line by line. Shared by every footprint host (footprint_mod.c exports it, for
 * the C host and, through ctypes, the Python host).
 *
 * footprint_dump(out) writes:
 *   pid N                          (the test attributes files and lines by it; not compared)
 *   threads N: <comm of each thread, sorted>
 *   fd N -> <where it points> <type> <cloexec|inherit> <access mode and flags>
 *   sig N NAME <ignore|handler> flags=0x.. mask=<signals>   (only the non-default ones)
 *   blocked <signals> / pending <signals> / altstack <off|size N>
 *   env NAME=VALUE                 (the real environ, sorted)
 *   cwd <getcwd> / cwd-link <readlink /proc/self/cwd> / umask 0NNN / fdsize N (FDSize)
 *   rlimit N <cur> <max>           (every resource)
 *   prctl ... / sched ... / fpu ... / locale ... / children <none|some>
 * Nothing here changes what it looks at; every descriptor it opens is closed before it
 * returns and is left out of the fd lines (the caller formats into memory first). */
#ifndef FOOTPRINT_H
#define FOOTPRINT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int fp_cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int fp_cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void fp_threads(FILE *out) {
    char *names[256];
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.' || n == 256) continue;
        char path[300], comm[64] = "?";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "re");
        if (f) {
            if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
            fclose(f);
        }
        names[n++] = strdup(comm);
    }
    if (d) closedir(d);
    qsort(names, n, sizeof *names, fp_cmp_str);
    fprintf(out, "threads %d:", n);
    for (int i = 0; i < n; i++) fprintf(out, " %s", names[i]), free(names[i]);
    fprintf(out, "\n");
}

static const char *fp_type(mode_t m) {
    return S_ISREG(m) ? "reg" : S_ISDIR(m) ? "dir" : S_ISCHR(m) ? "chr" : S_ISBLK(m) ? "blk"
         : S_ISFIFO(m) ? "fifo" : S_ISSOCK(m) ? "sock" : S_ISLNK(m) ? "lnk" : "other";
}

static void fp_fds(FILE *out) {
    int fds[1024], n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d) && n < 1024) fds[n++] = atoi(e->d_name);
    if (d) closedir(d);
    qsort(fds, n, sizeof *fds, fp_cmp_int);
    for (int i = 0; i < n; i++) {
        char path[64], target[PATH_MAX] = "?";
        snprintf(path, sizeof path, "/proc/self/fd/%d", fds[i]);
        ssize_t len = readlink(path, target, sizeof target - 1);
        target[len > 0 ? len : 1] = 0;
        struct stat st;
        int fd_flags = fcntl(fds[i], F_GETFD), fl = fcntl(fds[i], F_GETFL);
        if (fstat(fds[i], &st) != 0) st.st_mode = 0;
        int acc = fl & O_ACCMODE;
        fprintf(out, "fd %d -> %s %s %s %s%s%s\n", fds[i], target, fp_type(st.st_mode),
                fd_flags & FD_CLOEXEC ? "cloexec" : "inherit",
                acc == O_RDONLY ? "rdonly" : acc == O_WRONLY ? "wronly" : "rdwr", fl & O_APPEND ? " append" : "",
                fl & O_NONBLOCK ? " nonblock" : "");
    }
}

static void fp_sigset(FILE *out, const char *what, const sigset_t *set) {
    fprintf(out, "%s", what);
    for (int s = 1; s < 65; s++)
        if (sigismember(set, s) == 1) fprintf(out, " %d", s);
    fprintf(out, "\n");
}

static void fp_signals(FILE *out) {
    for (int s = 1; s < 65; s++) {
        struct sigaction sa;
        if (sigaction(s, NULL, &sa) != 0 || (!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL)) continue;
        const char *name = sigabbrev_np(s);
        fprintf(out, "sig %d %s %s flags=0x%x", s, name ? name : "RT",
                !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_IGN ? "ignore" : "handler", (unsigned)sa.sa_flags);
        fp_sigset(out, " mask", &sa.sa_mask);
    }
    sigset_t set;
    pthread_sigmask(SIG_BLOCK, NULL, &set);
    fp_sigset(out, "blocked", &set);
    sigpending(&set);
    fp_sigset(out, "pending", &set);
    stack_t ss;
    if (sigaltstack(NULL, &ss) == 0 && !(ss.ss_flags & SS_DISABLE)) fprintf(out, "altstack size %zu\n", ss.ss_size);
    else fprintf(out, "altstack off\n");
}

static void fp_environment(FILE *out) {
    int n = 0;
    while (environ && environ[n]) n++;
    char **sorted = malloc((n + 1) * sizeof *sorted);
    memcpy(sorted, environ, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, fp_cmp_str);
    for (int i = 0; i < n; i++) fprintf(out, "env %s\n", sorted[i]);
    free(sorted);
}

static void fp_process(FILE *out) {
    char buf[PATH_MAX];
    fprintf(out, "cwd %s\n", getcwd(buf, sizeof buf) ? buf : strerror(errno));
    ssize_t len = readlink("/proc/self/cwd", buf, sizeof buf - 1);
    buf[len > 0 ? len : 0] = 0;
    fprintf(out, "cwd-link %s\n", buf);
    mode_t mask = umask(0);
    umask(mask);
    fprintf(out, "umask 0%03o\n", (unsigned)mask);
    /* The size of the kernel's descriptor table: a descriptor number past it grows the
     * table for good, even once closed. */
    FILE *st = fopen("/proc/self/status", "re");
    char line[256];
    while (st && fgets(line, sizeof line, st))
        if (!strncmp(line, "FDSize:", 7)) fprintf(out, "fdsize %ld\n", strtol(line + 7, NULL, 10));
    if (st) fclose(st);
    for (int r = 0; r < RLIM_NLIMITS; r++) {
        struct rlimit l;
        if (getrlimit(r, &l) != 0) continue;
        fprintf(out, "rlimit %d ", r);
        if (l.rlim_cur == RLIM_INFINITY) fprintf(out, "inf ");
        else fprintf(out, "%llu ", (unsigned long long)l.rlim_cur);
        if (l.rlim_max == RLIM_INFINITY) fprintf(out, "inf\n");
        else fprintf(out, "%llu\n", (unsigned long long)l.rlim_max);
    }
    int deathsig = 0;
    prctl(PR_GET_PDEATHSIG, &deathsig);
    int subreaper = 0;
    prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
    fprintf(out, "prctl dumpable=%d no_new_privs=%d pdeathsig=%d subreaper=%d\n", prctl(PR_GET_DUMPABLE),
            prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), deathsig, subreaper);
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : -1;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    fprintf(out, "sched policy=%d cpus=%d nice=%d\n", sched_getscheduler(0), ncpu, nice);
#if defined(__x86_64__)
    unsigned mxcsr;
    unsigned short x87;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(x87));
    /* The control bits only (rounding, flush-to-zero, denormals-are-zero, exception masks):
     * the sticky exception flags are set by any floating-point code, the GEMM's included. */
    fprintf(out, "fpu mxcsr=0x%x x87=0x%x\n", mxcsr & 0xffc0, x87);
#endif
    fprintf(out, "locale %s\n", setlocale(LC_ALL, NULL));
    siginfo_t si;
    si.si_pid = 0;
    int w = waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT);
    fprintf(out, "children %s\n", w != 0 ? "none" : si.si_pid ? "exited-unreaped" : "running");
}

/* Everything above, in that order. */
static void footprint_dump(FILE *out) {
    fprintf(out, "pid %d\n", (int)getpid());
    fp_threads(out);
    fp_fds(out);
    fp_signals(out);
    fp_environment(out);
    fp_process(out);
}
#endif
