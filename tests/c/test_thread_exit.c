/*
 * Calls from a thread's exit path: a pthread key destructor (C's per-thread cleanup hook) runs
 * after the library's own thread-local storage has been torn down. A client that selects a
 * fallback or reports in-flight calls there must get the same answers as anywhere else, not
 * PLB_ERR_PANIC. Run for every strategy, and with zone preference and an ejected invoker.
 */
#include "plb_test.h"

#include <pthread.h>

static const uint64_t IDS[] = {1, 2, 3, 4};
static const uint64_t CANDIDATES[] = {2, 3, 4};
static const uint64_t EXCLUDED[] = {3};

static pthread_key_t exit_key;
static const plb_balancer *current;
static int64_t picked[3];
static int32_t reported[3];

/* Runs at thread exit, after the library's thread-local storage is gone. */
static void at_thread_exit(void *unused)
{
    (void)unused;
    picked[0] = plb_select(current, 0, plbt_u8("key"), 3, PLBT_T0_US);
    picked[1] = plb_select_among(current, 0, plbt_u8("key"), 3, CANDIDATES, 3, EXCLUDED, 1,
                                 PLBT_T0_US);
    picked[2] = plb_select_among(current, 0, NULL, 0, NULL, 0, EXCLUDED, 1, PLBT_T0_US);
    for (int i = 0; i < 3; i++)
        reported[i] = picked[i] < 0 ? PLB_OK
                                    : plb_report(current, 0, (uint64_t)picked[i], 10,
                                                 PLB_OUTCOME_SUCCESS, PLBT_T0_US);
}

static void *client(void *unused)
{
    (void)unused;
    /* Use the library on this thread first, so that its thread-local state exists. */
    for (int i = 0; i < 8; i++) {
        int64_t id = plb_select_among(current, 0, NULL, 0, CANDIDATES, 3, EXCLUDED, 1, PLBT_T0_US);
        if (id >= 0)
            plb_report(current, 0, (uint64_t)id, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
        id = plb_select(current, 0, plbt_u8("key"), 3, PLBT_T0_US);
        if (id >= 0)
            plb_report(current, 0, (uint64_t)id, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
    }
    if (pthread_setspecific(exit_key, &exit_key) != 0) {
        perror("pthread_setspecific");
        exit(2);
    }
    return NULL;
}

static void run(const char *config, int eject)
{
    plb_balancer *b = plbt_new(config);
    plb_invoker inv[4];
    char addr[4][32];
    plbt_invokers(inv, addr, IDS, NULL, 4);
    for (int i = 0; i < 4; i++) {
        inv[i].zone = plbt_u8(i == 0 ? "far" : "near");
        inv[i].zone_len = strlen(i == 0 ? "far" : "near");
    }
    EXPECT_STATUS(plbt_update(b, inv, 4), PLB_OK);
    if (eject) /* outlier.consecutiveFailures=1: one failure ejects invoker 4 */
        EXPECT_STATUS(plb_report(b, 0, 4, 10, PLB_OUTCOME_FAILURE, PLBT_T0_US), PLB_OK);

    current = b;
    for (int i = 0; i < 3; i++)
        picked[i] = -1000;
    pthread_t t;
    if (pthread_create(&t, NULL, client, NULL) != 0) {
        perror("pthread_create");
        exit(2);
    }
    pthread_join(t, NULL);

    if (!plbt_contains(IDS, 4, picked[0]))
        plbt_fail(__FILE__, __LINE__, "%s: plb_select at thread exit = %" PRId64 " (%s)", config,
                  picked[0], picked[0] < 0 ? plb_status_str((int32_t)picked[0]) : "not in the set");
    if (!plbt_contains(CANDIDATES, 3, picked[1]) || picked[1] == (int64_t)EXCLUDED[0])
        plbt_fail(__FILE__, __LINE__, "%s: plb_select_among at thread exit = %" PRId64 " (%s)",
                  config, picked[1],
                  picked[1] < 0 ? plb_status_str((int32_t)picked[1]) : "not a candidate");
    if (!plbt_contains(IDS, 4, picked[2]) || picked[2] == (int64_t)EXCLUDED[0])
        plbt_fail(__FILE__, __LINE__, "%s: plb_select_among (excluded only) at thread exit = %"
                  PRId64 " (%s)", config, picked[2],
                  picked[2] < 0 ? plb_status_str((int32_t)picked[2]) : "excluded or not in the set");
    for (int i = 0; i < 3; i++)
        EXPECT_STATUS(reported[i], PLB_OK);
    plbt_expect_idle(b, config);
    plb_balancer_free(b);
}

int main(void)
{
    if (pthread_key_create(&exit_key, at_thread_exit) != 0) {
        perror("pthread_key_create");
        return 2;
    }
    char names[PLBT_MAX_STRATEGIES][32];
    size_t n = plbt_strategies(names, PLBT_MAX_STRATEGIES);
    for (size_t i = 0; i < n; i++) {
        char config[160];
        snprintf(config, sizeof config, "loadbalance=%s", names[i]);
        run(config, 0);
        snprintf(config, sizeof config,
                 "loadbalance=%s&zone=near&outlier.consecutiveFailures=1"
                 "&outlier.maxEjectionPercent=50",
                 names[i]);
        run(config, 1);
    }
    pthread_key_delete(exit_key);
    return plbt_exit_code("test_thread_exit");
}
