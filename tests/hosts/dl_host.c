/* dl_host: a program that is not linked against rocBLAS and loads it (or a module linked
 * against it, or the interposer itself) at run time, for the loading tests.
 *
 * usage: dl_host STEP... [@main ARGS...]
 *   @early            call rocblas_gemm_ex as the global scope has it (the interposer's
 *                     export, if preloaded) before any rocBLAS is loaded; print
 *                     early=<status>, or early=absent when no such symbol exists
 *   @open:PATH:local  dlopen(PATH, RTLD_NOW | RTLD_LOCAL)   (print opened=PATH)
 *   @open:PATH:global dlopen(PATH, RTLD_NOW | RTLD_GLOBAL)
 *   @maps:TEXT        print mapped=<path> for each distinct mapped file whose path has TEXT
 *   @main ARGS...     call host_main(ARGS) of the last opened object that has it
 *                     (gemm_host.c built as a module); every later argument is for it
 *   @run:SPEC         host_main(SPEC) of the last opened module that has it, and go on
 *   @runat:I:SPEC     host_main(SPEC) of the I-th module opened (from 0), and go on
 *   @close            dlclose the last opened object (print closed=PATH)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gemm_ex_fn)(void *, int, int, int, int, int, const void *, const void *, int, int,
                          const void *, int, int, const void *, const void *, int, int, void *,
                          int, int, int, int, int32_t, uint32_t);
typedef int (*host_main_fn)(int, char **);

static struct { void *h; host_main_fn main; char path[1024]; } opened[16];
static int n_opened;

static int run_in(host_main_fn m, const char *spec) {
    if (!m) { fprintf(stderr, "dl_host: no module with host_main\n"); return 3; }
    char *args[] = {"dl_host", (char *)spec, NULL};
    int rc = m(2, args);
    fflush(stdout);
    return rc;
}

int main(int argc, char **argv) {
    host_main_fn host_main = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "@early")) {
            gemm_ex_fn f = (gemm_ex_fn)dlsym(RTLD_DEFAULT, "rocblas_gemm_ex");
            if (!f) {
                printf("early=absent\n");
            } else {
                float one = 1.0f, buf[4] = {0};
                int st = f((void *)buf, 111, 111, 1, 1, 1, &one, buf, 151, 1, buf, 151, 1, &one, buf,
                           151, 1, buf, 151, 1, 151, 0, 0, 0);
                printf("early=%d\n", st);
            }
            fflush(stdout);
        } else if (!strncmp(a, "@open:", 6)) {
            char path[1024];
            const char *mode = strrchr(a + 6, ':');
            if (!mode) return 2;
            snprintf(path, sizeof path, "%.*s", (int)(mode - (a + 6)), a + 6);
            int flags = RTLD_NOW | (!strcmp(mode + 1, "global") ? RTLD_GLOBAL : RTLD_LOCAL);
            void *h = dlopen(path, flags);
            if (!h) { fprintf(stderr, "dl_host: %s\n", dlerror()); return 3; }
            host_main_fn m = (host_main_fn)dlsym(h, "host_main");
            if (m) host_main = m;
            if (n_opened < 16) {
                opened[n_opened].h = h;
                opened[n_opened].main = m;
                snprintf(opened[n_opened].path, sizeof opened[0].path, "%s", path);
                n_opened++;
            }
            printf("opened=%s\n", path);
            fflush(stdout);
        } else if (!strncmp(a, "@maps:", 6)) {
            FILE *f = fopen("/proc/self/maps", "r");
            char line[2048], seen[16][1024];
            int n = 0;
            while (f && fgets(line, sizeof line, f)) {
                char *p = strchr(line, '/');
                if (!p || !strstr(p, a + 6)) continue;
                p[strcspn(p, "\n")] = 0;
                int dup = 0;
                for (int j = 0; j < n; j++) dup |= !strcmp(seen[j], p);
                if (dup || n == 16) continue;
                snprintf(seen[n++], sizeof seen[0], "%s", p);
                printf("mapped=%s\n", p);
            }
            if (f) fclose(f);
            fflush(stdout);
        } else if (!strncmp(a, "@run:", 5)) {
            host_main_fn m = NULL;
            for (int j = n_opened - 1; j >= 0 && !m; j--) m = opened[j].main;
            if (run_in(m, a + 5) != 0) return 4;
        } else if (!strncmp(a, "@runat:", 7)) {
            int at = atoi(a + 7);
            const char *spec = strchr(a + 7, ':');
            if (!spec || at < 0 || at >= n_opened) return 2;
            if (run_in(opened[at].main, spec + 1) != 0) return 4;
        } else if (!strcmp(a, "@close")) {
            if (n_opened == 0) return 2;
            n_opened--;
            if (dlclose(opened[n_opened].h) != 0) { fprintf(stderr, "dl_host: %s\n", dlerror()); return 3; }
            if (opened[n_opened].main == host_main) host_main = NULL;
            printf("closed=%s\n", opened[n_opened].path);
            fflush(stdout);
        } else if (!strcmp(a, "@main")) {
            if (!host_main) { fprintf(stderr, "dl_host: no module with host_main\n"); return 3; }
            argv[i] = "dl_host";
            int rc = host_main(argc - i, argv + i);
            fflush(stdout);
            return rc;
        } else {
            fprintf(stderr, "dl_host: unknown step %s\n", a);
            return 2;
        }
    }
    return 0;
}
