/* The C footprint host (tests/footprint.rs): `footprint_host MODULE STEP...` loads MODULE
 * (footprint_mod.c built for one backend) with RTLD_LOCAL, as Python loads PyTorch, runs
 * each STEP through its fp_step, then dumps "end" and returns 0. Built with -DFP_LINKED,
 * footprint_mod.c compiled in and linked against the BLAS library, the calls come from the
 * program and the library is in the global scope, as in a program linked against rocBLAS
 * (MODULE is then only named). One step is its own:
 *   exec   execs this program again with the steps that follow, as role "exec" */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int fp_step(const char *step);

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: footprint_host MODULE STEP...\n");
        return 2;
    }
#ifdef FP_LINKED
    int (*step)(const char *) = fp_step;
#else
    void *m = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    int (*step)(const char *) = m ? (int (*)(const char *))dlsym(m, "fp_step") : NULL;
    if (!step) {
        fprintf(stderr, "footprint_host: %s\n", dlerror());
        return 2;
    }
#endif
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "exec")) {
            char *args[256] = {argv[0], argv[1], "role:exec"};
            int n = 3;
            for (int j = i + 1; j < argc && n < 255; j++) args[n++] = argv[j];
            fflush(stdout);
            execv("/proc/self/exe", args);
            perror("footprint_host: exec");
            return 2;
        }
        if (step(argv[i]) != 0) {
            fprintf(stderr, "footprint_host: step %s failed\n", argv[i]);
            return 2;
        }
    }
    step("dump:end");
    return 0;
}
