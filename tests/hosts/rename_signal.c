/* rename_signal: a shim LD_PRELOADed into `tunedblas` by the store tests, to stop a command
 * at an exact point of its commit: right after the rename that puts the file named
 * $RENAME_SIGNAL_AFTER in place (its last path component; e.g. provenance.json), the process
 * sends itself signal $RENAME_SIGNAL (a number: 2 SIGINT, 15 SIGTERM, 9 SIGKILL), once.
 * Every other rename is passed on unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    static int sent;
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int r = real(from, to);
    const char *after = getenv("RENAME_SIGNAL_AFTER");
    const char *sig = getenv("RENAME_SIGNAL");
    const char *base = strrchr(to, '/');
    base = base ? base + 1 : to;
    if (r == 0 && !sent && after && sig && strcmp(base, after) == 0) {
        sent = 1;
        kill(getpid(), atoi(sig));
    }
    return r;
}
