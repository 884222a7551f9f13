/* What the CUDA and HIP runtime stand-ins (fake_cudart.c, fake_hip.c) share: an event is the
 * time it was recorded, on the host's monotonic clock. */
#ifndef FAKE_RUNTIME_H
#define FAKE_RUNTIME_H

#include <time.h>

typedef struct { double ms; } Event;

static void fake_event_record(Event *e) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    e->ms = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static float fake_event_elapsed(const Event *a, const Event *b) { return (float)(b->ms - a->ms); }

/* The event calls of the runtime whose functions start with `p` (cuda, hip): create,
 * record (now), synchronize (nothing to wait for), elapsed time; 2 is out of memory in both. */
#define FAKE_EVENTS(p)                                                                          \
    int p##EventCreate(Event **e) {                                                             \
        *e = calloc(1, sizeof **e);                                                             \
        return *e ? 0 : 2;                                                                      \
    }                                                                                           \
    int p##EventRecord(Event *e, void *st) {                                                    \
        (void)st;                                                                               \
        fake_event_record(e);                                                                   \
        return 0;                                                                               \
    }                                                                                           \
    int p##EventSynchronize(Event *e) {                                                         \
        (void)e;                                                                                \
        return 0;                                                                               \
    }                                                                                           \
    int p##EventElapsedTime(float *ms, Event *a, Event *b) {                                    \
        *ms = fake_event_elapsed(a, b);                                                         \
        return 0;                                                                               \
    }

#endif
