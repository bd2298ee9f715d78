/*
 * Concurrency through the C ABI: four threads select and report while a fifth replaces the
 * invoker set 1000 times (reordering, reweighting, dropping and re-adding an id). Every pick
 * is an id that some set contained, every call succeeds, and once all threads are joined no
 * call is left in flight. Run for every strategy.
 */
#include "plb_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define WORKERS 4
#define UPDATES 1000
#define MIN_CALLS_PER_WORKER 2000

/* Ids 1..8 are in the first two sets; the third swaps 8 for 9. */
static const uint64_t SET_A[] = {1, 2, 3, 4, 5, 6, 7, 8};
static const uint64_t SET_B[] = {8, 7, 6, 5, 4, 3, 2, 1};
static const uint64_t SET_C[] = {1, 2, 3, 4, 5, 6, 7, 9};
static const uint64_t EVERY_ID[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint64_t ALWAYS[] = {2, 3, 5}; /* in every set */

typedef struct {
    const plb_balancer *b;
    uint32_t methods[3];
    atomic_int *updating;
    int index;
    long calls, errors;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    uint64_t rng = 0x9E3779B97F4A7C15u * (uint64_t)(w->index + 1);
    for (long i = 0; atomic_load(w->updating) || i < MIN_CALLS_PER_WORKER; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        uint32_t m = w->methods[rng % 3];
        char key[16];
        int len = snprintf(key, sizeof key, "k%u", (unsigned)(rng >> 40) % 64);
        int64_t id;
        if (i % 4 == 3) {
            const uint64_t excluded[] = {ALWAYS[rng % 3]};
            id = plb_select_among(w->b, m, plbt_u8(key), (size_t)len, ALWAYS, 3, excluded, 1, 0);
            if (id < 0 || id == (int64_t)excluded[0] || !plbt_contains(ALWAYS, 3, id)) {
                w->errors++;
                continue;
            }
        } else {
            id = plb_select(w->b, m, plbt_u8(key), (size_t)len, 0);
            if (!plbt_contains(EVERY_ID, 9, id)) {
                w->errors++;
                continue;
            }
        }
        int32_t outcome = (int32_t)((rng >> 20) % 4);
        if (plb_report(w->b, m, (uint64_t)id, (int64_t)((rng >> 50) % 5000), outcome, 0) != PLB_OK)
            w->errors++;
        w->calls++;
    }
    return NULL;
}

static void run(const char *strategy)
{
    char config[64];
    snprintf(config, sizeof config, "loadbalance=%s", strategy);
    plb_balancer *b = plbt_new(config);
    plb_invoker a[8], bb[8], c[8];
    char aa[8][32], ba[8][32], ca[8][32];
    plbt_invokers(a, aa, SET_A, NULL, 8);
    plbt_invokers(bb, ba, SET_B, NULL, 8);
    plbt_invokers(c, ca, SET_C, NULL, 8);
    for (int i = 0; i < 8; i++)
        bb[i].weight = 50 + 25 * i;
    EXPECT_STATUS(plbt_update(b, a, 8), PLB_OK);

    atomic_int updating = 1;
    worker_arg args[WORKERS];
    pthread_t threads[WORKERS];
    for (int t = 0; t < WORKERS; t++) {
        args[t].b = b;
        args[t].methods[0] = 0;
        args[t].methods[1] = plbt_method(b, "get");
        args[t].methods[2] = plbt_method(b, "put");
        args[t].updating = &updating;
        args[t].index = t;
        args[t].calls = args[t].errors = 0;
        if (pthread_create(&threads[t], NULL, worker, &args[t]) != 0) {
            perror("pthread_create");
            exit(2);
        }
    }
    int update_errors = 0;
    for (int i = 0; i < UPDATES; i++) {
        const plb_invoker *set = i % 3 == 0 ? bb : i % 3 == 1 ? c : a;
        update_errors += plb_balancer_update(b, set, 8, NULL, 0, NULL) != PLB_OK;
        if (i % 100 == 0) { /* stats while everything runs */
            char *json = plbt_stats_json(b, 0);
            EXPECT(json != NULL);
            free(json);
        }
    }
    atomic_store(&updating, 0);
    long calls = 0, errors = 0;
    for (int t = 0; t < WORKERS; t++) {
        pthread_join(threads[t], NULL);
        calls += args[t].calls;
        errors += args[t].errors;
    }
    EXPECT_EQ(update_errors, 0);
    EXPECT_EQ(errors, 0);
    EXPECT(calls >= WORKERS * MIN_CALLS_PER_WORKER);

    /* The last update (i = 999, 999 % 3 == 0) installed set B. */
    plbt_row rows[9];
    EXPECT_EQ(plbt_stats(b, 0, rows, 9, NULL, 0), 8);
    for (int i = 0; i < 8; i++) {
        EXPECT_EQ(rows[i].id, SET_B[i]);
        if (rows[i].active != 0)
            plbt_fail(__FILE__, __LINE__, "%s: invoker %" PRIu64 " has %lld call(s) in flight",
                      strategy, rows[i].id, rows[i].active);
    }
    printf("  %-18s %ld calls during %d updates\n", strategy, calls, UPDATES);
    plb_balancer_free(b);
}

int main(void)
{
    char names[PLBT_MAX_STRATEGIES][32];
    size_t n = plbt_strategies(names, PLBT_MAX_STRATEGIES);
    for (size_t i = 0; i < n; i++)
        run(names[i]);
    return plbt_exit_code("test_threads");
}
