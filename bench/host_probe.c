/* What the host's core does now, for the benchmark report: the clock (one add per cycle on a
 * dependent chain) and the width (independent adds retired per cycle). Two hosts with one CPU
 * name can differ in both, and polylb's path, with more independent work per call than the
 * floors' dependent chains, gains more from a wider core. x86-64 only (inline asm). */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const long n = 100000000L;
    uint64_t a = 1, x0 = 1, x1 = 2, x2 = 3, x3 = 4, x4 = 5, x5 = 6;
    double best_chain = 1e9, best_wide = 1e9;
    for (int round = 0; round < 3; round++) { /* the best of 3: a shared host has pauses */
        double t0 = now();
        for (long i = 0; i < n; i++) __asm__ volatile("add $1, %0" : "+r"(a));
        double chain = now() - t0;
        t0 = now();
        for (long i = 0; i < n; i++)
            __asm__ volatile("add $1, %0\n\tadd $1, %1\n\tadd $1, %2\n\tadd $1, %3\n\tadd $1, %4\n\tadd $1, %5"
                             : "+r"(x0), "+r"(x1), "+r"(x2), "+r"(x3), "+r"(x4), "+r"(x5));
        double wide = now() - t0;
        if (chain < best_chain) best_chain = chain;
        if (wide < best_wide) best_wide = wide;
    }
    double ghz = n / best_chain / 1e9;
    printf("core at %.2f GHz, %.1f independent adds per cycle\n", ghz, 6.0 * n / best_wide / 1e9 / ghz);
    return (int)((a + x0 + x1 + x2 + x3 + x4 + x5) & 0); /* keeps the chains alive */
}
