/* The interposer's miss-file names, for the hosts that plant files under them
 * (fault_host.c, lt_host.c): "<host>-<pid>-<start><tag>-rank0", as cdylib/src/recorder.rs
 * names them. */
#ifndef MISS_NAMES_H
#define MISS_NAMES_H
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This process's start time in clock ticks since boot (field 22 of /proc/self/stat). */
static unsigned long long start_ticks(void) {
    char buf[4096];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[len] = 0;
    char *p = strrchr(buf, ')');
    unsigned long long v = 0;
    /* After ") " come fields 3, 4, ...: starttime is the 20th of them. */
    for (int field = 3; p && field <= 22; field++) {
        p = strchr(p, ' ');
        if (!p) break;
        p++;
        if (field == 22) v = strtoull(p, NULL, 10);
    }
    return v;
}

/* "<host>-<pid>-<start><tag>-rank0" ("" or "-cublaslt" as tag). */
static void miss_prefix_tagged(char *out, size_t n, const char *tag) {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "host");
    for (char *c = host; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '_') *c = '_';
    snprintf(out, n, "%s-%d-%llu%s-rank0", host, (int)getpid(), start_ticks(), tag);
}
#endif
