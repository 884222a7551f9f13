/* A setting of the environment read once per process, for the stand-ins and hosts that
 * read their settings on every call (GNU C: C and C++ alike). A getenv walks the whole
 * environment, whose length the interposer's own variables (LD_PRELOAD, TUNEDBLAS_*)
 * change, and a stand-in's fault hook may only be reached by a tuned call: read per call,
 * both would count as instructions the interposer adds (bench/lt/instructions.sh). No
 * host changes its environment after start-up. */
#ifndef ENV_ONCE_H
#define ENV_ONCE_H

#include <stdlib.h>

#define ENV_ONCE(name)                                                    \
    (__extension__({                                                      \
        static const char *env_once_value;                                \
        static int env_once_read;                                         \
        if (!__atomic_load_n(&env_once_read, __ATOMIC_ACQUIRE)) {         \
            env_once_value = getenv(name);                                \
            __atomic_store_n(&env_once_read, 1, __ATOMIC_RELEASE);        \
        }                                                                 \
        env_once_value;                                                   \
    }))

#endif
