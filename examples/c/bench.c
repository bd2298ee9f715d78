/*
 * Times one plb_select + plb_report pair from C, for random and leastactive over 10 and 100
 * invokers: a clock_gettime loop, several repetitions, the median. examples/ffi_overhead.rs
 * times the same calls through the Rust API, and bench.sh runs both and prints the ratio.
 *
 * Output, one line per case: "<strategy> <n> <median ns/op> <min ns/op>".
 */
#define _POSIX_C_SOURCE 199309L
#include <polylb.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ITERS 1000000
#define REPS 9

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The same set as examples/ffi_overhead.rs: ids 1..n, weights 50, 100, 150, 200, 50, ... */
static plb_balancer *setup(const char *strategy, int n)
{
    static char addr[100][32];
    plb_invoker inv[100];
    char config[64];
    plb_balancer *b = NULL;
    snprintf(config, sizeof config, "loadbalance=%s", strategy);
    if (plb_balancer_new((const uint8_t *)config, strlen(config), &b, NULL, 0, NULL) != PLB_OK)
        exit(1);
    for (int i = 0; i < n; i++) {
        snprintf(addr[i], sizeof addr[i], "10.0.%d.%d:20880", i / 256, i % 256);
        memset(&inv[i], 0, sizeof inv[i]);
        inv[i].id = (uint64_t)(i + 1);
        inv[i].address = (const uint8_t *)addr[i];
        inv[i].address_len = strlen(addr[i]);
        inv[i].weight = 50 * (1 + i % 4);
        inv[i].warmup_ms = -1;
    }
    if (plb_balancer_update(b, inv, (size_t)n, NULL, 0, NULL) != PLB_OK)
        exit(1);
    return b;
}

/* ns per select + report pair over ITERS pairs; `sink` keeps the loop honest. */
static double run(const plb_balancer *b, uint64_t *sink)
{
    double t0 = now_ns();
    for (int i = 0; i < ITERS; i++) {
        int64_t id = plb_select(b, 0, NULL, 0, 0);
        plb_report(b, 0, (uint64_t)id, 1000, PLB_OUTCOME_SUCCESS, 0);
        *sink += (uint64_t)id;
    }
    return (now_ns() - t0) / ITERS;
}

int main(void)
{
    static const char *const strategies[] = {"random", "leastactive"};
    static const int sizes[] = {10, 100};
    uint64_t sink = 0;
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            plb_balancer *b = setup(strategies[s], sizes[k]);
            double t[REPS];
            run(b, &sink); /* warm-up */
            for (int r = 0; r < REPS; r++)
                t[r] = run(b, &sink);
            qsort(t, REPS, sizeof t[0], cmp);
            printf("%s %d %.2f %.2f\n", strategies[s], sizes[k], t[REPS / 2], t[0]);
            plb_balancer_free(b);
        }
    fprintf(stderr, "(checksum %llu)\n", (unsigned long long)sink);
    return 0;
}
