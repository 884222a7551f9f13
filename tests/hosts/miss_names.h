/* The interposer's miss-file names, for the hosts that plant files under them
 * (fault_host.c, linear_host.h): "<host>-<pid>-<start>.<nonce><tag>-rank0", as
 * preload/src/files.rs names them. The nonce is random, so no one can plant a file under a
 * name before the interposer made it: a host finds its own name in DIR after a first miss
 * (and removes the file there, which only the same user can do) to plant in its place. */
#ifndef MISS_NAMES_H
#define MISS_NAMES_H
#include <ctype.h>
#include <dirent.h>
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

/* "<host>-<pid>-<start>.<nonce><tag>-rank0" ("" or "-cublaslt" as tag) of the log this
 * process already has in DIR; without one, the name with no nonce (which the interposer
 * never uses). */
static void miss_prefix_tagged(char *out, size_t n, const char *dir, const char *tag) {
    char host[256] = {0}, want[320], end[64];
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "host");
    for (char *c = host; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '_') *c = '_';
    snprintf(want, sizeof want, "%s-%d-%llu.", host, (int)getpid(), start_ticks());
    snprintf(end, sizeof end, "%s-rank0.csv", tag);
    snprintf(out, n, "%s-%d-%llu%s-rank0", host, (int)getpid(), start_ticks(), tag);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name), el = strlen(end);
        if (!strncmp(e->d_name, want, strlen(want)) && len > el &&
            !strcmp(e->d_name + len - el, end) && !strstr(e->d_name, ".counts")) {
            snprintf(out, n, "%.*s", (int)(len - 4), e->d_name);
            break;
        }
    }
    if (d) closedir(d);
}

/* DIR/<this process's log name><suffix>, with whatever is there now removed. */
static void plant_path(char *out, size_t n, const char *dir, const char *tag, const char *suffix) {
    char prefix[320];
    miss_prefix_tagged(prefix, sizeof prefix, dir, tag);
    snprintf(out, n, "%s/%s%s", dir, prefix, suffix);
    unlink(out);
}
#endif
