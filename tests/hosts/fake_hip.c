/* A stand-in for libamdhip64.so.6 for the CPU tests of the hipBLASLt path, as fake_cudart.c
 * is for CUDA: only what the hipBLASLt stand-in and the interposer ask of the HIP runtime.
 * hipGetDevice answers the device $FAKEHIP_DEVICE (0 when unset); a negative one makes it
 * fail with hipErrorNoDevice (100), as on a machine without a GPU. */
#include <stdlib.h>

int hipGetDevice(int *device) {
    const char *v = getenv("FAKEHIP_DEVICE");
    int d = v ? atoi(v) : 0;
    if (!device) return 1; /* hipErrorInvalidValue */
    if (d < 0) return 100;
    *device = d;
    return 0;
}
