/* Steps more than one host takes (fault_host.c, linear_host.h). */
#ifndef HOST_STEPS_H
#define HOST_STEPS_H

#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* `@vfork-fail`: vfork, exec a path that does not exist, _exit(127) in the child (which
 * shares the parent's memory until then); prints the child's exit status. */
static void vfork_fail(void) {
    fflush(stdout);
    pid_t pid = vfork();
    if (pid == 0) {
        char *args[] = {"/nonexistent/tunedblas-test", NULL};
        execv(args[0], args);
        _exit(127);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    printf("vfork-child=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

#endif
