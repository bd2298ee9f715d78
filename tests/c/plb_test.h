/*
 * Helpers shared by the C test programs in tests/c (driven by tests/c_abi.rs).
 *
 * Checks keep going after a failure so that one run shows every broken expectation; main
 * returns plbt_exit_code(). Everything is static inline: each test is one translation unit.
 */
#ifndef PLB_TEST_H
#define PLB_TEST_H

#include "polylb.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A fixed virtual clock (Unix microseconds, Nov 2023) so that runs are deterministic. */
#define PLBT_T0_US INT64_C(1700000000000000)

static int plbt_failures;

static inline void plbt_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: FAILED: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    plbt_failures++;
}

#define EXPECT(cond)                                                                        \
    do {                                                                                    \
        if (!(cond))                                                                        \
            plbt_fail(__FILE__, __LINE__, "%s", #cond);                                     \
    } while (0)

/* Integer equality; both sides are evaluated once and printed on failure. */
#define EXPECT_EQ(actual, expected)                                                         \
    do {                                                                                    \
        long long plbt_a_ = (long long)(actual), plbt_e_ = (long long)(expected);           \
        if (plbt_a_ != plbt_e_)                                                             \
            plbt_fail(__FILE__, __LINE__, "%s == %s: got %lld, expected %lld", #actual,     \
                      #expected, plbt_a_, plbt_e_);                                         \
    } while (0)

/* A status (or negated status) with its text, for readable failures. */
#define EXPECT_STATUS(actual, expected)                                                     \
    do {                                                                                    \
        long long plbt_a_ = (long long)(actual), plbt_e_ = (long long)(expected);           \
        if (plbt_a_ != plbt_e_)                                                             \
            plbt_fail(__FILE__, __LINE__, "%s: got %lld (%s), expected %lld (%s)", #actual, \
                      plbt_a_, plb_status_str((int32_t)plbt_a_), plbt_e_,                   \
                      plb_status_str((int32_t)plbt_e_));                                    \
    } while (0)

static inline int plbt_exit_code(const char *name)
{
    if (plbt_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, plbt_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

/* ---- building inputs ---------------------------------------------------------------- */

static inline const uint8_t *plbt_u8(const char *s)
{
    return (const uint8_t *)s;
}

/* An invoker with Dubbo's defaults (no warm-up, no zone); `address` must outlive its use. */
static inline plb_invoker plbt_inv(uint64_t id, const char *address, int32_t weight)
{
    plb_invoker v;
    memset(&v, 0, sizeof v);
    v.id = id;
    v.address = plbt_u8(address);
    v.address_len = strlen(address);
    v.weight = weight;
    v.start_time_ms = 0;
    v.warmup_ms = -1;
    v.zone = NULL;
    v.zone_len = 0;
    return v;
}

/* Fills `out[i]` for ids[i] with addresses "10.0.<id/256>.<id%256>:20880" kept in `addr`. */
static inline void plbt_invokers(plb_invoker *out, char (*addr)[32], const uint64_t *ids,
                                 const int32_t *weights, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(addr[i], sizeof addr[i], "10.0.%u.%u:20880", (unsigned)(ids[i] / 256 % 256),
                 (unsigned)(ids[i] % 256));
        out[i] = plbt_inv(ids[i], addr[i], weights ? weights[i] : 100);
    }
}

/* Creates a balancer or ends the test: every later check needs one. */
static inline plb_balancer *plbt_new(const char *config)
{
    plb_balancer *b = NULL;
    char err[4096];
    size_t err_len = 0;
    int32_t rc = plb_balancer_new(plbt_u8(config), strlen(config), &b, err, sizeof err, &err_len);
    if (rc != PLB_OK || b == NULL) {
        fprintf(stderr, "plb_balancer_new(\"%s\") = %d (%s): %s\n", config, (int)rc,
                plb_status_str(rc), err);
        exit(2);
    }
    return b;
}

static inline int32_t plbt_update(const plb_balancer *b, const plb_invoker *inv, size_t n)
{
    char err[4096] = "";
    size_t err_len = 0;
    int32_t rc = plb_balancer_update(b, inv, n, err, sizeof err, &err_len);
    if (rc != PLB_OK)
        fprintf(stderr, "  (update rejected: %s)\n", err);
    return rc;
}

static inline uint32_t plbt_method(const plb_balancer *b, const char *name)
{
    uint32_t m = UINT32_MAX;
    int32_t rc = plb_balancer_method(b, plbt_u8(name), strlen(name), &m);
    if (rc != PLB_OK) {
        fprintf(stderr, "plb_balancer_method(\"%s\") = %d\n", name, (int)rc);
        exit(2);
    }
    return m;
}

static inline int plbt_contains(const uint64_t *ids, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (id >= 0 && ids[i] == (uint64_t)id)
            return 1;
    return 0;
}

/* ---- reading stats ------------------------------------------------------------------ */

/* The counters of one invoker, as listed by plb_balancer_stats (summed over methods). */
typedef struct {
    uint64_t id;
    long long weight, effective_weight, active, selected, succeeded, failures, timeouts;
} plbt_row;

/* Value of `"name":<integer>` inside [obj, end), or `missing` if absent. */
static inline long long plbt_field(const char *obj, const char *end, const char *name,
                                   long long missing)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    const char *p = strstr(obj, pat);
    if (p == NULL || p >= end)
        return missing;
    return strtoll(p + strlen(pat), NULL, 10);
}

/*
 * Fetches the stats JSON with the documented protocol: ask for the length with cap 0, then
 * allocate exactly length + 1 (so every caller exercises it). While other threads run, the
 * counters may grow between the two calls: then retry with room to spare. Returns a malloc'ed
 * NUL-terminated string, or NULL (after a failed check) on error.
 */
static inline char *plbt_stats_json(const plb_balancer *b, int64_t now_us)
{
    size_t need = 0, cap;
    int32_t rc = plb_balancer_stats(b, now_us, NULL, 0, &need);
    EXPECT_STATUS(rc, PLB_ERR_BUFFER_TOO_SMALL);
    cap = need + 1;
    for (int attempt = 0; attempt < 8; attempt++) {
        char *buf = (char *)malloc(cap);
        size_t len = 0;
        if (buf == NULL)
            abort();
        rc = plb_balancer_stats(b, now_us, buf, cap, &len);
        if (rc == PLB_OK) {
            EXPECT_EQ(len, strlen(buf));
            return buf;
        }
        free(buf);
        EXPECT_STATUS(rc, PLB_ERR_BUFFER_TOO_SMALL);
        EXPECT(len >= cap); /* the needed length, which did not fit */
        cap = 2 * len + 1;
    }
    plbt_fail(__FILE__, __LINE__, "stats never fit");
    return NULL;
}

/*
 * Parses the invokers listed by plb_balancer_stats (set order) into rows[0..max); returns
 * how many there are (may exceed max). Copies the strategy name into `strategy` if given.
 */
static inline size_t plbt_stats(const plb_balancer *b, int64_t now_us, plbt_row *rows,
                                size_t max, char *strategy, size_t strategy_cap)
{
    char *json = plbt_stats_json(b, now_us);
    size_t n = 0;
    if (json == NULL)
        return 0;
    if (strategy != NULL && strategy_cap > 0) {
        const char *s = strstr(json, "\"strategy\":\"");
        strategy[0] = 0;
        if (s != NULL) {
            s += strlen("\"strategy\":\"");
            size_t k = 0;
            while (s[k] && s[k] != '"' && k + 1 < strategy_cap) {
                strategy[k] = s[k];
                k++;
            }
            strategy[k] = 0;
        }
    }
    const char *end_of_json = json + strlen(json);
    for (const char *p = strstr(json, "{\"id\":"); p != NULL; p = strstr(p + 1, "{\"id\":")) {
        /* This invoker's own fields end where its per-method list or the next invoker starts. */
        const char *end = strstr(p + 1, "\"methods\":");
        const char *next = strstr(p + 1, "{\"id\":");
        if (end == NULL)
            end = end_of_json;
        if (next != NULL && next < end)
            end = next;
        if (n < max) {
            plbt_row *r = &rows[n];
            r->id = strtoull(p + strlen("{\"id\":"), NULL, 10);
            r->weight = plbt_field(p, end, "weight", -1);
            r->effective_weight = plbt_field(p, end, "effective_weight", -1);
            r->active = plbt_field(p, end, "active", -1);
            r->selected = plbt_field(p, end, "selected", -1);
            r->succeeded = plbt_field(p, end, "succeeded", -1);
            r->failures = plbt_field(p, end, "failures", -1);
            r->timeouts = plbt_field(p, end, "timeouts", -1);
        }
        n++;
    }
    free(json);
    return n;
}

/* Every invoker listed by stats reports 0 calls in flight. */
static inline void plbt_expect_idle(const plb_balancer *b, const char *what)
{
    plbt_row rows[256];
    size_t n = plbt_stats(b, PLBT_T0_US, rows, 256, NULL, 0);
    for (size_t i = 0; i < n && i < 256; i++)
        if (rows[i].active != 0)
            plbt_fail(__FILE__, __LINE__, "%s: invoker %" PRIu64 " has %lld call(s) in flight",
                      what, rows[i].id, rows[i].active);
}

/*
 * The balancer still holds exactly ids[0..n) (stats list them in this order) and picks among
 * them: used after every rejected update. Its picks are cancelled, so the calls in flight are
 * the same afterwards (checked).
 */
static inline void plbt_expect_set(const plb_balancer *b, const uint64_t *ids, size_t n,
                                   const char *what)
{
    plbt_row rows[64], after[64];
    size_t listed = plbt_stats(b, PLBT_T0_US, rows, 64, NULL, 0);
    if (listed != n) {
        plbt_fail(__FILE__, __LINE__, "%s: stats list %zu invokers, expected %zu", what,
                  listed, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (rows[i].id != ids[i])
            plbt_fail(__FILE__, __LINE__, "%s: stats invoker #%zu is %" PRIu64
                      ", expected %" PRIu64, what, i, rows[i].id, ids[i]);
    for (size_t i = 0; i < 4 * n + 1; i++) {
        char key[16];
        int len = snprintf(key, sizeof key, "key-%zu", i);
        int64_t id = plb_select(b, 0, plbt_u8(key), (size_t)len, PLBT_T0_US);
        if (n == 0) {
            EXPECT_STATUS(id, -PLB_ERR_NO_PROVIDER);
            continue;
        }
        if (!plbt_contains(ids, n, id))
            plbt_fail(__FILE__, __LINE__, "%s: select returned %" PRId64 " (%s), not in the set",
                      what, id, id < 0 ? plb_status_str((int32_t)id) : "an id");
        else
            EXPECT_STATUS(plb_report(b, 0, (uint64_t)id, 0, PLB_OUTCOME_CANCELLED, PLBT_T0_US),
                          PLB_OK);
    }
    if (plbt_stats(b, PLBT_T0_US, after, 64, NULL, 0) != n)
        return;
    for (size_t i = 0; i < n; i++)
        if (after[i].active != rows[i].active)
            plbt_fail(__FILE__, __LINE__, "%s: invoker %" PRIu64 " had %lld call(s) in flight, "
                      "now %lld", what, ids[i], rows[i].active, after[i].active);
}

/* ---- strategies --------------------------------------------------------------------- */

/* Dubbo's six: their names never change meaning. */
static const char *const plbt_dubbo_strategies[] = {
    "random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive",
};
#define PLBT_DUBBO_STRATEGIES 6
#define PLBT_MAX_STRATEGIES 32

/*
 * Every strategy the library knows: Dubbo's six, plus any other name listed by the error of
 * an unknown `loadbalance` value ("...; known: a, b, c"), so that new strategies are tested
 * as soon as they exist. Returns the count; names are copied into names[i][32].
 */
static inline size_t plbt_strategies(char (*names)[32], size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < PLBT_DUBBO_STRATEGIES && n < max; i++)
        snprintf(names[n++], sizeof names[0], "%s", plbt_dubbo_strategies[i]);

    const char *config = "loadbalance=no-such-strategy";
    char err[4096] = "";
    size_t err_len = 0;
    plb_balancer *b = NULL;
    int32_t rc =
        plb_balancer_new(plbt_u8(config), strlen(config), &b, err, sizeof err, &err_len);
    EXPECT_STATUS(rc, PLB_ERR_INVALID_CONFIG);
    EXPECT(b == NULL);
    const char *known = strstr(err, "known: ");
    if (known == NULL) {
        plbt_fail(__FILE__, __LINE__, "no list of known strategies in \"%s\"", err);
        return n;
    }
    known += strlen("known: ");
    int listed_dubbo = 0;
    while (*known && n < max) {
        size_t len = strcspn(known, ", .;)");
        if (len > 0 && len < sizeof names[0]) {
            char name[32];
            memcpy(name, known, len);
            name[len] = 0;
            size_t j = 0;
            while (j < n && strcmp(names[j], name) != 0)
                j++;
            if (j < PLBT_DUBBO_STRATEGIES)
                listed_dubbo++;
            else if (j == n)
                memcpy(names[n++], name, len + 1);
        }
        known += len;
        known += strspn(known, ", .;)");
    }
    if (listed_dubbo != PLBT_DUBBO_STRATEGIES)
        plbt_fail(__FILE__, __LINE__, "the known strategies in \"%s\" lack some of Dubbo's six",
                  err);
    return n;
}

#endif /* PLB_TEST_H */
