/*
 * Every input a caller can get wrong returns its documented code, writes out-parameters only
 * on success, and leaves the balancer usable with its previous invoker set.
 */
#include "plb_test.h"

#include <math.h>

/* Buffers are allocated at their exact capacity so that ASan/valgrind catch any overrun. */
static char *exact(size_t cap)
{
    char *p = malloc(cap ? cap : 1);
    if (p == NULL)
        abort();
    memset(p, 'X', cap ? cap : 1);
    return p;
}

/* A non-NULL handle that is never dereferenced: out-parameters must keep it on failure. */
static int sentinel_object;
#define SENTINEL ((plb_balancer *)(void *)&sentinel_object)

static int32_t try_new(const char *config, size_t len, plb_balancer **out, char *err,
                       size_t cap, size_t *err_len)
{
    return plb_balancer_new(config ? plbt_u8(config) : NULL, len, out, err, cap, err_len);
}

/* Config rejected with `code`; the message (complete and NUL-terminated) contains `hint`. */
static void expect_bad_config(const char *config, size_t len, int32_t code, const char *hint)
{
    plb_balancer *out = SENTINEL;
    char err[4096];
    size_t err_len = 12345;
    memset(err, 'X', sizeof err);
    int32_t rc = try_new(config, len, &out, err, sizeof err, &err_len);
    if (rc != code)
        plbt_fail(__FILE__, __LINE__, "config \"%s\": got %d (%s), expected %d", config,
                  (int)rc, plb_status_str(rc), (int)code);
    EXPECT(out == SENTINEL);
    EXPECT(err_len > 0 && err_len < sizeof err);
    if (err_len < sizeof err) {
        EXPECT_EQ(err[err_len], 0);
        EXPECT_EQ(strlen(err), err_len);
    }
    if (hint != NULL && strstr(err, hint) == NULL)
        plbt_fail(__FILE__, __LINE__, "config \"%s\": message \"%s\" lacks \"%s\"", config, err,
                  hint);
    if (rc == PLB_OK && out != SENTINEL)
        plb_balancer_free(out);
}

static void config_errors(void)
{
    plb_balancer *out = SENTINEL;
    char err[256];
    size_t err_len = 0;

    /* NULL out, NULL config with a length. */
    EXPECT_STATUS(try_new("loadbalance=random", 18, NULL, err, sizeof err, &err_len),
                  PLB_ERR_NULL_POINTER);
    EXPECT(err_len > 0 && strlen(err) == err_len);
    expect_bad_config(NULL, 5, PLB_ERR_NULL_POINTER, NULL);

    /* NULL with length 0 is the empty config: random with Dubbo's defaults. */
    EXPECT_STATUS(try_new(NULL, 0, &out, NULL, 0, NULL), PLB_OK);
    EXPECT(out != SENTINEL && out != NULL);
    if (out != SENTINEL) {
        char name[32];
        plbt_row row;
        plbt_stats(out, 0, &row, 1, name, sizeof name);
        EXPECT(strcmp(name, "random") == 0);
        plb_balancer_free(out);
    }

    /* Invalid UTF-8: a lone continuation byte, a truncated sequence, an overlong encoding. */
    expect_bad_config("loadbalance=\xff", strlen("loadbalance=\xff"), PLB_ERR_INVALID_UTF8, NULL);
    expect_bad_config("seed=1&\xe2\x82", strlen("seed=1&\xe2\x82"), PLB_ERR_INVALID_UTF8, NULL);
    expect_bad_config("\xc0\xafseed=1", strlen("\xc0\xafseed=1"), PLB_ERR_INVALID_UTF8, NULL);
    /*
     * The length counts, not a NUL: an embedded NUL is a character of an unknown key. The
     * message echoes the key escaped (`\0x`), so it is one C string: strlen(err) == *err_len.
     */
    expect_bad_config("seed=1&\0x=1", 11, PLB_ERR_INVALID_CONFIG, "'\\0x'");

    /* Unknown or misspelled keys name the nearest valid one. */
    static const struct {
        const char *config, *hint;
    } bad[] = {
        {"loadBalance=roundrobin", "'loadbalance'"},
        {"LOADBALANCE=random", "'loadbalance'"},
        {"load_balance=random", "'loadbalance'"},
        {"hash.node=160", "'hash.nodes'"},
        {"hash_nodes=160", "'hash.nodes'"},
        {"shortestresponse.slideperiod=1000", "'shortestresponse.slidePeriod'"},
        {"timout=100", "'timeout'"},
        {"warmUp=1000", "'warmup'"},
        {"sead=1", "'seed'"},
        {"loadbalance=roundrobbin", "'roundrobin'"},
        {"loadbalance=leastActive", "'leastactive'"},
        {"loadbalance=consistenthash&hash.nodes=3", "hash.nodes"},
        {"hash.nodes=abc", "hash.nodes"},
        {"timeout=0", "timeout"},
        {"seed=-1", "seed"},
        {"warmup", "warmup"},
        {"loadbalance=random&loadbalance=random", "loadbalance"},
        {"frobnicate=1", "frobnicate"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad_config(bad[i].config, strlen(bad[i].config), PLB_ERR_INVALID_CONFIG,
                          bad[i].hint);

    /* A message that does not fit is truncated, NUL-terminated, and still the config error. */
    const char *cfg = "loadBalance=roundrobin";
    char full[4096];
    size_t full_len = 0;
    EXPECT_STATUS(try_new(cfg, strlen(cfg), &out, full, sizeof full, &full_len),
                  PLB_ERR_INVALID_CONFIG);
    EXPECT(full_len > 20);
    const size_t caps[] = {1, 2, 8, 20, full_len, full_len + 1, full_len + 2};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        size_t cap = caps[i], len = 12345;
        char *buf = exact(cap);
        out = SENTINEL;
        EXPECT_STATUS(try_new(cfg, strlen(cfg), &out, buf, cap, &len), PLB_ERR_INVALID_CONFIG);
        EXPECT(out == SENTINEL);
        size_t want = full_len < cap - 1 ? full_len : cap - 1;
        EXPECT_EQ(len, want);
        if (len == want) {
            EXPECT_EQ(buf[want], 0);
            EXPECT(memcmp(buf, full, want) == 0);
        }
        free(buf);
    }
    /* err_cap 0: nothing is written, the length is 0. */
    {
        char one = 'X';
        size_t len = 12345;
        EXPECT_STATUS(try_new(cfg, strlen(cfg), &out, &one, 0, &len), PLB_ERR_INVALID_CONFIG);
        EXPECT_EQ(one, 'X');
        EXPECT_EQ(len, 0);
    }
    /* No buffer and no length pointer at all: still just the status. */
    EXPECT_STATUS(try_new(cfg, strlen(cfg), &out, NULL, 0, NULL), PLB_ERR_INVALID_CONFIG);
    EXPECT_STATUS(try_new(cfg, strlen(cfg), &out, NULL, 100, NULL), PLB_ERR_INVALID_CONFIG);

    /* Truncation never splits a UTF-8 character: the key "lōadbalance" is echoed back. */
    const char *utf = "l\xc5\x8d"
                      "adbalance=random";
    EXPECT_STATUS(try_new(utf, strlen(utf), &out, full, sizeof full, &full_len),
                  PLB_ERR_INVALID_CONFIG);
    const char *multi = strstr(full, "\xc5\x8d");
    if (multi == NULL) {
        plbt_fail(__FILE__, __LINE__, "message \"%s\" does not echo the key", full);
    } else {
        size_t at = (size_t)(multi - full), len = 0;
        char *buf = exact(at + 2); /* room for the first byte of the character only */
        EXPECT_STATUS(try_new(utf, strlen(utf), &out, buf, at + 2, &len),
                      PLB_ERR_INVALID_CONFIG);
        EXPECT_EQ(len, at);
        EXPECT_EQ(buf[at], 0);
        free(buf);
    }
}

static void null_handle(void)
{
    plb_invoker inv = plbt_inv(1, "10.0.0.1:20880", 100);
    char err[256] = "";
    size_t len = 12345;
    uint32_t m = 777;
    const uint64_t ids[] = {1};

    EXPECT_STATUS(plb_balancer_update(NULL, &inv, 1, err, sizeof err, &len),
                  PLB_ERR_NULL_POINTER);
    EXPECT(len > 0 && strlen(err) == len);
    EXPECT_STATUS(plb_balancer_update(NULL, NULL, 0, NULL, 0, NULL), PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_balancer_method(NULL, plbt_u8("m"), 1, &m), PLB_ERR_NULL_POINTER);
    EXPECT_EQ(m, 777);
    strcpy(err, "stale");
    EXPECT_STATUS(plb_balancer_stats(NULL, 0, err, sizeof err, &len), PLB_ERR_NULL_POINTER);
    EXPECT(err[0] == '\0'); /* never a stale string left in the buffer */
    EXPECT_STATUS(plb_select(NULL, 0, NULL, 0, 0), -PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_select_among(NULL, 0, NULL, 0, ids, 1, NULL, 0, 0), -PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_report(NULL, 0, 1, 0, PLB_OUTCOME_SUCCESS, 0), PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_select32(NULL, 0, NULL, 0), -PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_report32(NULL, 0, 0, 1, 0, PLB_OUTCOME_SUCCESS), PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_report_provider_metrics(NULL, 0, 1, 1000, 0.5, 10, 0),
                  PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_report_load(NULL, 1, 100, 0, 0.5, 0), PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_report_reconnect(NULL, 1, 0), PLB_ERR_NULL_POINTER);
    plb_balancer_free(NULL); /* a no-op */
}

/* One rejected update: its code, a complete message, and the previous set intact. */
static void expect_rejected(const plb_balancer *b, const plb_invoker *inv, size_t n,
                            int32_t code, const char *what, const uint64_t *prev, size_t n_prev)
{
    char err[256];
    size_t len = 12345;
    memset(err, 'X', sizeof err);
    int32_t rc = plb_balancer_update(b, inv, n, err, sizeof err, &len);
    if (rc != code)
        plbt_fail(__FILE__, __LINE__, "%s: update got %d (%s), expected %d (%s)", what, (int)rc,
                  plb_status_str(rc), (int)code, plb_status_str(code));
    EXPECT(len > 0 && len < sizeof err);
    if (len < sizeof err)
        EXPECT_EQ(strlen(err), len);
    /* A short buffer truncates the message but not the verdict. */
    char small[8];
    EXPECT_STATUS(plb_balancer_update(b, inv, n, small, sizeof small, &len), code);
    EXPECT_EQ(len, 7);
    EXPECT_EQ(strlen(small), 7);
    plbt_expect_set(b, prev, n_prev, what);
}

static void rejected_updates(const char *strategy)
{
    char config[64];
    snprintf(config, sizeof config, "loadbalance=%s", strategy);
    plb_balancer *b = plbt_new(config);
    const uint64_t prev[] = {21, 22, 23};
    plb_invoker good[3];
    char addr[3][32];
    plbt_invokers(good, addr, prev, NULL, 3);
    EXPECT_STATUS(plbt_update(b, good, 3), PLB_OK);
    plbt_expect_set(b, prev, 3, "initial set");

    /* A call in flight across the rejected updates keeps its count. */
    int64_t held = plb_select(b, 0, NULL, 0, PLBT_T0_US);
    EXPECT(plbt_contains(prev, 3, held));

    /* Three new, valid invokers, then one field broken at a time (the first ones stay valid,
       so a partial apply would show up as new ids). */
    const uint64_t fresh[] = {31, 32, 33};
    plb_invoker inv[3];
    char faddr[3][32];
    plbt_invokers(inv, faddr, fresh, NULL, 3);
#define BROKEN(assignments, code, what)                                                     \
    do {                                                                                    \
        plb_invoker t[3];                                                                   \
        memcpy(t, inv, sizeof t);                                                           \
        assignments;                                                                        \
        expect_rejected(b, t, 3, code, what, prev, 3);                                      \
    } while (0)

    expect_rejected(b, NULL, 2, PLB_ERR_NULL_POINTER, "invokers NULL, n = 2", prev, 3);
    BROKEN(t[1].address = NULL, PLB_ERR_NULL_POINTER, "address NULL with a length");
    BROKEN((t[2].zone = NULL, t[2].zone_len = 3), PLB_ERR_NULL_POINTER,
           "zone NULL with a length");
    BROKEN((t[2].address = plbt_u8("10.0.0.\xff:1"), t[2].address_len = 11),
           PLB_ERR_INVALID_UTF8, "address not UTF-8");
    BROKEN((t[2].zone = plbt_u8("\xed\xa0\x80"), t[2].zone_len = 3), PLB_ERR_INVALID_UTF8,
           "zone not UTF-8 (an encoded surrogate)");
    BROKEN(t[1].weight = -1, PLB_ERR_NEGATIVE_WEIGHT, "weight -1");
    BROKEN(t[2].weight = INT32_MIN, PLB_ERR_NEGATIVE_WEIGHT, "weight INT32_MIN");
    BROKEN(t[2].id = t[0].id, PLB_ERR_DUPLICATE_ID, "duplicate id");
    BROKEN(t[2].id = (uint64_t)INT64_MAX + 1, PLB_ERR_ID_OUT_OF_RANGE, "id INT64_MAX + 1");
    BROKEN(t[2].id = UINT64_MAX, PLB_ERR_ID_OUT_OF_RANGE, "id UINT64_MAX");
#undef BROKEN

    plbt_row rows[3];
    EXPECT_EQ(plbt_stats(b, PLBT_T0_US, rows, 3, NULL, 0), 3);
    for (int i = 0; i < 3; i++)
        EXPECT_EQ(rows[i].active, (int64_t)rows[i].id == held);
    if (held >= 0)
        EXPECT_STATUS(plb_report(b, 0, (uint64_t)held, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US),
                      PLB_OK);
    plbt_expect_idle(b, strategy);

    /* The empty set is accepted; a rejected update then keeps it empty. */
    EXPECT_STATUS(plb_balancer_update(b, NULL, 0, NULL, 0, NULL), PLB_OK);
    plbt_expect_set(b, NULL, 0, "empty set");
    inv[1].weight = -5;
    expect_rejected(b, inv, 3, PLB_ERR_NEGATIVE_WEIGHT, "negative weight on an empty set", NULL,
                    0);
    plb_balancer_free(b);
}

static void method_errors(void)
{
    plb_balancer *b = plbt_new("loadbalance=leastactive");
    const uint64_t ids[] = {1, 2};
    plb_invoker inv[2];
    char addr[2][32];
    plbt_invokers(inv, addr, ids, NULL, 2);
    EXPECT_STATUS(plbt_update(b, inv, 2), PLB_OK);

    uint32_t m = 777;
    EXPECT_STATUS(plb_balancer_method(b, NULL, 3, &m), PLB_ERR_NULL_POINTER);
    EXPECT_EQ(m, 777);
    EXPECT_STATUS(plb_balancer_method(b, plbt_u8("echo"), 4, NULL), PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_balancer_method(b, plbt_u8("ech\xc3"), 4, &m), PLB_ERR_INVALID_UTF8);
    EXPECT_EQ(m, 777);
    EXPECT_STATUS(plb_balancer_method(b, NULL, 0, &m), PLB_OK);
    EXPECT_EQ(m, 0);
    uint32_t echo = plbt_method(b, "echo");
    EXPECT(echo > 0);
    /* Names are compared by bytes and length: "echo" and "echo\0" differ. */
    EXPECT_STATUS(plb_balancer_method(b, plbt_u8("echo"), 5, &m), PLB_OK);
    EXPECT(m != echo && m > 0);
    uint32_t last = m;

    const uint32_t unknown[] = {last + 1, last + 1000, 1u << 20, UINT32_MAX};
    const uint64_t cand[] = {1, 2};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        uint32_t u = unknown[i];
        EXPECT_STATUS(plb_select(b, u, NULL, 0, PLBT_T0_US), -PLB_ERR_UNKNOWN_METHOD);
        EXPECT_STATUS(plb_select_among(b, u, NULL, 0, cand, 2, NULL, 0, PLBT_T0_US),
                      -PLB_ERR_UNKNOWN_METHOD);
        EXPECT_STATUS(plb_report(b, u, 1, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US),
                      PLB_ERR_UNKNOWN_METHOD);
        EXPECT_STATUS(plb_report_provider_metrics(b, u, 1, 1000, 0.5, 10, PLBT_T0_US),
                      PLB_ERR_UNKNOWN_METHOD);
    }
    plbt_expect_idle(b, "after unknown methods");
    plbt_expect_set(b, ids, 2, "after unknown methods");
    plb_balancer_free(b);
}

static void select_errors(const char *config)
{
    plb_balancer *b = plbt_new(config);
    const uint64_t ids[] = {1, 2, 3};
    plb_invoker inv[3];
    char addr[3][32];
    plbt_invokers(inv, addr, ids, NULL, 3);
    EXPECT_STATUS(plbt_update(b, inv, 3), PLB_OK);

    /* NULL with a length is an error even where the strategy ignores the key. */
    EXPECT_STATUS(plb_select(b, 0, NULL, 4, PLBT_T0_US), -PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 4, NULL, 0, NULL, 0, PLBT_T0_US),
                  -PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, NULL, 2, NULL, 0, PLBT_T0_US),
                  -PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, NULL, 0, NULL, 1, PLBT_T0_US),
                  -PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, ids, 3, NULL, 1, PLBT_T0_US),
                  -PLB_ERR_NULL_POINTER);
    plbt_expect_idle(b, config);

    /* Non-NULL pointers with length 0 mean "no key" and "all candidates". */
    int64_t id = plb_select_among(b, 0, plbt_u8("k"), 0, ids, 0, ids, 0, PLBT_T0_US);
    EXPECT(plbt_contains(ids, 3, id));
    if (id >= 0)
        plb_report(b, 0, (uint64_t)id, 1, PLB_OUTCOME_CANCELLED, PLBT_T0_US);

    /* Every candidate excluded; a candidate outside the set. */
    const uint64_t two[] = {2, 3}, stranger[] = {2, 4}, big[] = {UINT64_MAX};
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, NULL, 0, ids, 3, PLBT_T0_US),
                  -PLB_ERR_NO_CANDIDATE);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, two, 2, two, 2, PLBT_T0_US),
                  -PLB_ERR_NO_CANDIDATE);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, stranger, 2, NULL, 0, PLBT_T0_US),
                  -PLB_ERR_UNKNOWN_CANDIDATE);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, big, 1, NULL, 0, PLBT_T0_US),
                  -PLB_ERR_UNKNOWN_CANDIDATE);
    plbt_expect_idle(b, config);
    plbt_expect_set(b, ids, 3, config);
    plb_balancer_free(b);
}

static void report_errors(void)
{
    plb_balancer *b = plbt_new("loadbalance=adaptive");
    const uint64_t ids[] = {7, 8};
    plb_invoker inv[2];
    char addr[2][32];
    plbt_invokers(inv, addr, ids, NULL, 2);
    EXPECT_STATUS(plbt_update(b, inv, 2), PLB_OK);
    uint32_t m = plbt_method(b, "get");

    int64_t id = plb_select(b, m, NULL, 0, PLBT_T0_US);
    EXPECT(plbt_contains(ids, 2, id));
    if (id < 0)
        id = 7;
    const int32_t bad[] = {4, -1, 100, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT_STATUS(plb_report(b, m, (uint64_t)id, 10, bad[i], PLBT_T0_US),
                      PLB_ERR_UNKNOWN_OUTCOME);
    EXPECT_STATUS(plb_report(b, m, (uint64_t)id, -1, PLB_OUTCOME_SUCCESS, PLBT_T0_US),
                  PLB_ERR_INVALID_ARGUMENT);
    plbt_row rows[2];
    plbt_stats(b, PLBT_T0_US, rows, 2, NULL, 0);
    for (int i = 0; i < 2; i++) {
        EXPECT_EQ(rows[i].active, (int64_t)rows[i].id == id); /* rejected reports change nothing */
        EXPECT_EQ(rows[i].succeeded + rows[i].failures, 0);
    }
    EXPECT_STATUS(plb_report(b, m, (uint64_t)id, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US), PLB_OK);
    plbt_expect_idle(b, "report");

    /* Unknown or departed ids are accepted and ignored; counts never go below 0. */
    EXPECT_STATUS(plb_report(b, m, 12345, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report(b, m, UINT64_MAX, 10, PLB_OUTCOME_FAILURE, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report(b, 0, 8, 10, PLB_OUTCOME_TIMEOUT, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report(b, 0, 8, 10, PLB_OUTCOME_CANCELLED, PLBT_T0_US), PLB_OK);
    plbt_expect_idle(b, "unmatched reports");
    plbt_stats(b, PLBT_T0_US, rows, 2, NULL, 0);
    EXPECT_EQ(rows[0].succeeded + rows[1].succeeded, 1);
    EXPECT_EQ(rows[1].timeouts, 1);

    /* Provider metrics: domain errors, and harmless for unknown ids. */
    EXPECT_STATUS(plb_report_provider_metrics(b, m, 7, 1000, NAN, 10, PLBT_T0_US),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_provider_metrics(b, m, 7, 1000, INFINITY, 10, PLBT_T0_US),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_provider_metrics(b, m, 7, 1000, -0.5, 10, PLBT_T0_US),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_provider_metrics(b, m, 7, 1000, 0.5, -10, PLBT_T0_US),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_provider_metrics(b, m, 7, 1000, 0.5, 10, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report_provider_metrics(b, m, 999, 1000, 0.5, 10, PLBT_T0_US), PLB_OK);
    plbt_expect_set(b, ids, 2, "after provider metrics");

    /* Load reports (orca's; others check and ignore them): domain errors, unknown ids. */
    EXPECT_STATUS(plb_report_load(b, 7, NAN, 0, 0.5, PLBT_T0_US), PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_load(b, 7, 100, INFINITY, 0.5, PLBT_T0_US),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_load(b, 7, 100, 0, -0.5, PLBT_T0_US), PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_load(b, 7, 100, 101, 0.5, PLBT_T0_US), PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_report_load(b, 7, 100, 1, 0.5, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report_load(b, 999, 100, 1, 0.5, PLBT_T0_US), PLB_OK);
    plbt_expect_set(b, ids, 2, "after load reports");
    EXPECT_STATUS(plb_report_reconnect(b, 7, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report_reconnect(b, 999, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report_reconnect(b, UINT64_MAX, -1), PLB_OK);
    plbt_expect_set(b, ids, 2, "after reconnects");
    plb_balancer_free(b);
}

/*
 * A length that no array can have (its size in bytes above PTRDIFF_MAX: typically (size_t)-1
 * passed for "unknown" or "NUL-terminated") is PLB_ERR_INVALID_ARGUMENT, found before anything
 * is read, even where the strategy ignores the data; a rejected update changes nothing.
 */
static void huge_lengths(const char *config)
{
    plb_balancer *b = plbt_new(config);
    const uint64_t ids[] = {1, 2, 3};
    plb_invoker inv[3];
    char addr[3][32];
    plbt_invokers(inv, addr, ids, NULL, 3);
    EXPECT_STATUS(plbt_update(b, inv, 3), PLB_OK);

    const size_t huge_bytes = SIZE_MAX, huge_ids = SIZE_MAX / sizeof(uint64_t) / 2 + 1,
                 huge_set = SIZE_MAX / sizeof(plb_invoker) / 2 + 1;
    uint32_t m = 777;
    EXPECT_STATUS(plb_select(b, 0, plbt_u8("k"), huge_bytes, PLBT_T0_US),
                  -PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_select_among(b, 0, plbt_u8("k"), huge_bytes, NULL, 0, NULL, 0, PLBT_T0_US),
                  -PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, ids, huge_ids, NULL, 0, PLBT_T0_US),
                  -PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_select_among(b, 0, NULL, 0, NULL, 0, ids, huge_ids, PLBT_T0_US),
                  -PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(plb_balancer_method(b, plbt_u8("m"), huge_bytes, &m), PLB_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(m, 777);
    /* NULL stays the first verdict. */
    EXPECT_STATUS(plb_select(b, 0, NULL, huge_bytes, PLBT_T0_US), -PLB_ERR_NULL_POINTER);

    plb_balancer *out = SENTINEL;
    EXPECT_STATUS(plb_balancer_new(plbt_u8("seed=1"), huge_bytes, &out, NULL, 0, NULL),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT(out == SENTINEL);
    expect_rejected(b, inv, huge_set, PLB_ERR_INVALID_ARGUMENT, "n too large", ids, 3);
    expect_rejected(b, inv, SIZE_MAX, PLB_ERR_INVALID_ARGUMENT, "n = SIZE_MAX", ids, 3);
    plb_invoker broken[3];
    memcpy(broken, inv, sizeof broken);
    broken[1].address_len = huge_bytes;
    expect_rejected(b, broken, 3, PLB_ERR_INVALID_ARGUMENT, "address_len = SIZE_MAX", ids, 3);
    memcpy(broken, inv, sizeof broken);
    broken[2].zone = plbt_u8("z");
    broken[2].zone_len = huge_bytes;
    expect_rejected(b, broken, 3, PLB_ERR_INVALID_ARGUMENT, "zone_len = SIZE_MAX", ids, 3);
    plbt_expect_idle(b, config);
    plb_balancer_free(b);
}

static void stats_errors(void)
{
    plb_balancer *b = plbt_new("loadbalance=roundrobin");
    const uint64_t ids[] = {1, 2, 3};
    plb_invoker inv[3];
    char addr[3][32];
    plbt_invokers(inv, addr, ids, NULL, 3);
    EXPECT_STATUS(plbt_update(b, inv, 3), PLB_OK);

    char small[4] = "abc";
    size_t len = 12345, need = 0;
    EXPECT_STATUS(plb_balancer_stats(b, PLBT_T0_US, small, sizeof small, NULL),
                  PLB_ERR_NULL_POINTER);
    EXPECT(small[0] == '\0'); /* never a stale string left in the buffer */
    EXPECT_STATUS(plb_balancer_stats(b, PLBT_T0_US, NULL, 10, &len), PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(plb_balancer_stats(b, PLBT_T0_US, NULL, 0, &need), PLB_ERR_BUFFER_TOO_SMALL);
    EXPECT(need > 20);

    const size_t caps[] = {1, 2, need / 2, need - 1, need};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        char *buf = exact(caps[i]);
        len = 12345;
        EXPECT_STATUS(plb_balancer_stats(b, PLBT_T0_US, buf, caps[i], &len),
                      PLB_ERR_BUFFER_TOO_SMALL);
        EXPECT_EQ(len, need);
        free(buf);
    }
    char *buf = exact(need + 1);
    EXPECT_STATUS(plb_balancer_stats(b, PLBT_T0_US, buf, need + 1, &len), PLB_OK);
    EXPECT_EQ(len, need);
    EXPECT_EQ(buf[need], 0);
    EXPECT_EQ(strlen(buf), need);
    EXPECT(buf[0] == '{' && buf[need - 1] == '}');
    free(buf);
    plbt_expect_set(b, ids, 3, "after stats");
    plb_balancer_free(b);
}

static void status_texts(void)
{
    const char *text[16];
    for (int32_t c = 0; c <= PLB_ERR_LIMIT_EXCEEDED; c++) {
        text[c] = plb_status_str(c);
        EXPECT(text[c] != NULL && text[c][0] != 0);
        const char *neg = plb_status_str(-c);
        EXPECT(neg != NULL && text[c] != NULL && strcmp(neg, text[c]) == 0);
        for (int32_t d = 0; d < c; d++)
            if (text[c] != NULL && text[d] != NULL && strcmp(text[c], text[d]) == 0)
                plbt_fail(__FILE__, __LINE__, "codes %d and %d share the text \"%s\"", (int)c,
                          (int)d, text[c]);
    }
    const int32_t unknown[] = {PLB_ERR_LIMIT_EXCEEDED + 1, 99, -99, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *t = plb_status_str(unknown[i]);
        EXPECT(t != NULL && t[0] != 0);
        for (int c = 0; c <= PLB_ERR_LIMIT_EXCEEDED && t != NULL; c++)
            EXPECT(text[c] == NULL || strcmp(t, text[c]) != 0);
    }
    EXPECT_EQ(plb_abi_version(), PLB_ABI_VERSION);
    EXPECT(plb_version() != NULL && plb_version()[0] >= '0' && plb_version()[0] <= '9');
}

int main(void)
{
    char names[PLBT_MAX_STRATEGIES][32];
    size_t n = plbt_strategies(names, PLBT_MAX_STRATEGIES);
    config_errors();
    null_handle();
    for (size_t i = 0; i < n; i++)
        rejected_updates(names[i]);
    method_errors();
    select_errors("loadbalance=random");
    select_errors("loadbalance=consistenthash");
    select_errors("loadbalance=roundrobin");
    report_errors();
    huge_lengths("loadbalance=random");
    huge_lengths("loadbalance=consistenthash");
    stats_errors();
    status_texts();
    return plbt_exit_code("test_errors");
}
