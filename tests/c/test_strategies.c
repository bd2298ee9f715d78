/*
 * Every strategy through the C ABI: picks stay in the set and in the candidate subset, the
 * counters add up, calls in flight return to 0, and each of Dubbo's strategies shows its
 * defining behaviour (round robin's sequence, least active's avoidance, consistent hashing's
 * stable keys, random's zero weights, shortest response's preference, warm-up weights).
 */
#include "plb_test.h"

#define N 5
static const uint64_t IDS[N] = {11, 12, 13, 14, 15};

static plb_balancer *with_set(const char *config, const uint64_t *ids, const int32_t *weights,
                              size_t n)
{
    plb_invoker inv[16];
    char addr[16][32];
    plb_balancer *b = plbt_new(config);
    plbt_invokers(inv, addr, ids, weights, n);
    EXPECT_STATUS(plbt_update(b, inv, n), PLB_OK);
    return b;
}

/* `count` of `draws` picks lies within 5 binomial standard deviations of draws * p: with a fixed
 * seed the count never changes, and a correct strategy leaves the band with odds below 1e-6. */
static void expect_binomial_at(int line, int count, int draws, double p, const char *what)
{
    /* Squared, so the test needs no libm: |count - mean| > 5 sd <=> (count - mean)^2 > 25 var. */
    double mean = draws * p, var = draws * p * (1 - p), d = count - mean;
    if (d * d > 25 * var)
        plbt_fail(__FILE__, line, "%s: %d of %d picks, expected %.1f, sd^2 %.1f (5 sd band)",
                  what, count, draws, mean, var);
}
#define expect_binomial(count, draws, p, what) expect_binomial_at(__LINE__, count, draws, p, what)

/* Checks every strategy must pass, whatever its policy. */
static void generic(const char *name)
{
    char config[128], listed[64];
    plbt_row rows[N + 1];
    /* A fixed seed: the spread checked at the end is the same on every run. */
    snprintf(config, sizeof config, "loadbalance=%s&seed=3", name);
    plb_balancer *b = plbt_new(config);

    EXPECT_EQ(plbt_stats(b, PLBT_T0_US, rows, N, listed, sizeof listed), 0);
    if (strcmp(listed, name) != 0)
        plbt_fail(__FILE__, __LINE__, "%s: stats name the strategy \"%s\"", name, listed);
    EXPECT_STATUS(plb_select(b, 0, NULL, 0, PLBT_T0_US), -PLB_ERR_NO_PROVIDER);

    plb_invoker inv[N];
    char addr[N][32];
    plbt_invokers(inv, addr, IDS, NULL, N);
    inv[2].zone = plbt_u8("zone-a");
    inv[2].zone_len = strlen("zone-a");
    EXPECT_STATUS(plbt_update(b, inv, N), PLB_OK);
    uint32_t say = plbt_method(b, "sayHello");
    EXPECT(say != 0);
    EXPECT_EQ(plbt_method(b, ""), 0);
    EXPECT_EQ(plbt_method(b, "sayHello"), say);

    /* 2000 calls with every outcome; virtual time advances 1 ms per call. */
    long long picked[N] = {0}, ok = 0, failed = 0, timeouts = 0;
    int64_t now = PLBT_T0_US;
    for (int i = 0; i < 2000; i++, now += 1000) {
        char key[16];
        int len = snprintf(key, sizeof key, "user-%d", i % 50);
        uint32_t m = (i & 1) ? say : 0;
        int64_t id = plb_select(b, m, plbt_u8(key), (size_t)len, now);
        if (!plbt_contains(IDS, N, id)) {
            plbt_fail(__FILE__, __LINE__, "%s: select returned %" PRId64, name, id);
            continue;
        }
        picked[id - 11]++;
        int32_t outcome = i % 4;
        EXPECT_STATUS(plb_report(b, m, (uint64_t)id, 500 + (i * 37) % 3000, outcome, now), PLB_OK);
        ok += outcome == PLB_OUTCOME_SUCCESS;
        failed += outcome == PLB_OUTCOME_FAILURE || outcome == PLB_OUTCOME_TIMEOUT;
        timeouts += outcome == PLB_OUTCOME_TIMEOUT;
    }
    EXPECT_EQ(plbt_stats(b, now, rows, N, NULL, 0), N);
    long long sel = 0, succ = 0, fail = 0, tmo = 0;
    for (int i = 0; i < N; i++) {
        EXPECT_EQ(rows[i].id, IDS[i]);
        EXPECT_EQ(rows[i].active, 0);
        EXPECT_EQ(rows[i].selected, picked[i]);
        sel += rows[i].selected;
        succ += rows[i].succeeded;
        fail += rows[i].failures;
        tmo += rows[i].timeouts;
    }
    EXPECT_EQ(sel, 2000);
    EXPECT_EQ(succ, ok);
    EXPECT_EQ(fail, failed);
    EXPECT_EQ(tmo, timeouts);

    /* The library's own clock (now_us = 0) works too. */
    int64_t id = plb_select(b, say, NULL, 0, 0);
    EXPECT(plbt_contains(IDS, N, id));
    EXPECT_STATUS(plb_report(b, say, (uint64_t)id, 100, PLB_OUTCOME_SUCCESS, 0), PLB_OK);

    /* Calls in flight are counted per invoker until reported. */
    int64_t held[10];
    long long expect_active[N] = {0};
    for (int i = 0; i < 10; i++) {
        held[i] = plb_select(b, say, plbt_u8("k"), 1, now);
        EXPECT(plbt_contains(IDS, N, held[i]));
        if (plbt_contains(IDS, N, held[i]))
            expect_active[held[i] - 11]++;
    }
    plbt_stats(b, now, rows, N, NULL, 0);
    for (int i = 0; i < N; i++)
        EXPECT_EQ(rows[i].active, expect_active[i]);
    for (int i = 0; i < 10; i++)
        if (held[i] >= 0)
            EXPECT_STATUS(plb_report(b, say, (uint64_t)held[i], 800, PLB_OUTCOME_SUCCESS, now),
                          PLB_OK);
    plbt_expect_idle(b, name);

    /* Subsets and exclusions are membership filters. */
    const uint64_t even[] = {12, 14}, only13[] = {13}, ex_first[] = {11, 12}, ex12[] = {12};
    const uint64_t unknown[] = {99}, partly_unknown[] = {12, 99};
    for (int i = 0; i < 50; i++) {
        char key[16];
        int len = snprintf(key, sizeof key, "s-%d", i);
        int64_t r = plb_select_among(b, say, plbt_u8(key), (size_t)len, even, 2, NULL, 0, now);
        EXPECT(r == 12 || r == 14);
        if (r >= 0)
            plb_report(b, say, (uint64_t)r, 0, PLB_OUTCOME_CANCELLED, now);
        r = plb_select_among(b, say, plbt_u8(key), (size_t)len, NULL, 0, ex_first, 2, now);
        EXPECT(r == 13 || r == 14 || r == 15);
        if (r >= 0)
            plb_report(b, say, (uint64_t)r, 0, PLB_OUTCOME_CANCELLED, now);
        r = plb_select_among(b, say, plbt_u8(key), (size_t)len, even, 2, ex12, 1, now);
        EXPECT_EQ(r, 14);
        if (r >= 0)
            plb_report(b, say, (uint64_t)r, 0, PLB_OUTCOME_CANCELLED, now);
        r = plb_select_among(b, say, plbt_u8(key), (size_t)len, only13, 1, unknown, 1, now);
        EXPECT_EQ(r, 13);
        if (r >= 0)
            plb_report(b, say, (uint64_t)r, 0, PLB_OUTCOME_CANCELLED, now);
    }
    EXPECT_STATUS(plb_select_among(b, say, NULL, 0, NULL, 0, IDS, N, now), -PLB_ERR_NO_CANDIDATE);
    EXPECT_STATUS(plb_select_among(b, say, NULL, 0, ex12, 1, ex12, 1, now),
                  -PLB_ERR_NO_CANDIDATE);
    EXPECT_STATUS(plb_select_among(b, say, NULL, 0, unknown, 1, NULL, 0, now),
                  -PLB_ERR_UNKNOWN_CANDIDATE);
    EXPECT_STATUS(plb_select_among(b, say, NULL, 0, partly_unknown, 2, NULL, 0, now),
                  -PLB_ERR_UNKNOWN_CANDIDATE);
    plbt_expect_idle(b, name); /* failed selects leave nothing in flight */

    /* Cancelled undoes the in-flight count and nothing else. */
    plbt_stats(b, now, rows, N, NULL, 0);
    long long before_succ = 0, before_fail = 0;
    for (int i = 0; i < N; i++) {
        before_succ += rows[i].succeeded;
        before_fail += rows[i].failures;
    }
    id = plb_select(b, 0, NULL, 0, now);
    EXPECT(plbt_contains(IDS, N, id));
    plbt_stats(b, now, rows, N, NULL, 0);
    EXPECT_EQ(rows[id >= 11 && id <= 15 ? id - 11 : 0].active, 1);
    EXPECT_STATUS(plb_report(b, 0, (uint64_t)id, 5000, PLB_OUTCOME_CANCELLED, now), PLB_OK);
    plbt_stats(b, now, rows, N, NULL, 0);
    long long after_succ = 0, after_fail = 0;
    for (int i = 0; i < N; i++) {
        EXPECT_EQ(rows[i].active, 0);
        after_succ += rows[i].succeeded;
        after_fail += rows[i].failures;
    }
    EXPECT_EQ(after_succ, before_succ);
    EXPECT_EQ(after_fail, before_fail);

    /* A second report of the same call never drives the count below 0. */
    EXPECT_STATUS(plb_report(b, 0, (uint64_t)id, 5000, PLB_OUTCOME_CANCELLED, now), PLB_OK);
    plbt_expect_idle(b, name);

    /* State of ids that stay survives an update (here: in-flight calls). */
    id = plb_select(b, say, NULL, 0, now);
    EXPECT(plbt_contains(IDS, N, id));
    plb_invoker reordered[N];
    for (int i = 0; i < N; i++)
        reordered[i] = inv[N - 1 - i];
    EXPECT_STATUS(plbt_update(b, reordered, N), PLB_OK);
    plbt_stats(b, now, rows, N, NULL, 0);
    for (int i = 0; i < N; i++) {
        EXPECT_EQ(rows[i].id, IDS[N - 1 - i]);
        EXPECT_EQ(rows[i].active, (int64_t)rows[i].id == id);
    }
    EXPECT_STATUS(plb_report(b, say, (uint64_t)id, 700, PLB_OUTCOME_SUCCESS, now), PLB_OK);
    plbt_expect_idle(b, name);

    /* All weights 0 is a legal set: selects still pick one of its invokers. */
    plb_invoker zero[N];
    for (int i = 0; i < N; i++) {
        zero[i] = inv[i];
        zero[i].weight = 0;
    }
    EXPECT_STATUS(plbt_update(b, zero, N), PLB_OK);
    for (int i = 0; i < 20; i++) {
        id = plb_select(b, say, plbt_u8("z"), 1, now);
        EXPECT(plbt_contains(IDS, N, id));
        if (id >= 0)
            plb_report(b, say, (uint64_t)id, 100, PLB_OUTCOME_SUCCESS, now);
    }

    /* The largest valid id comes back intact through the int64_t return. */
    plb_invoker big = plbt_inv((uint64_t)INT64_MAX, "10.9.9.9:20880", 100);
    EXPECT_STATUS(plbt_update(b, &big, 1), PLB_OK);
    EXPECT_EQ(plb_select(b, say, NULL, 0, now), INT64_MAX);
    EXPECT_STATUS(plb_report(b, say, (uint64_t)INT64_MAX, 1, PLB_OUTCOME_SUCCESS, now), PLB_OK);

    /* An empty set is accepted; select then has no provider. */
    EXPECT_STATUS(plbt_update(b, NULL, 0), PLB_OK);
    EXPECT_STATUS(plb_select(b, say, NULL, 0, now), -PLB_ERR_NO_PROVIDER);
    EXPECT_STATUS(plb_select_among(b, say, NULL, 0, even, 2, NULL, 0, now), -PLB_ERR_NO_PROVIDER);
    EXPECT_EQ(plbt_stats(b, now, rows, N, NULL, 0), 0);

    plb_balancer_free(b);

    /* The 2000 calls above, over five invokers of weight 100. */
    if (strcmp(name, "random") == 0 || strcmp(name, "leastactive") == 0) {
        /* Each call is reported before the next, so leastactive sees ties too: every pick is a
         * draw by weight, and each invoker's count is Binomial(2000, 1/5). (Merely reaching
         * every invoker would let a draw that gives one of them double its share pass.) */
        for (int i = 0; i < N; i++)
            expect_binomial((int)picked[i], 2000, 1.0 / N, name);
    } else if (strcmp(name, "roundrobin") == 0) {
        /* Smooth round robin per method (two methods, 1000 calls each): exactly 200 + 200. */
        for (int i = 0; i < N; i++)
            if (picked[i] != 2000 / N)
                plbt_fail(__FILE__, __LINE__, "roundrobin: invoker %" PRIu64 " picked %lld times",
                          IDS[i], picked[i]);
    } else if (strcmp(name, "consistenthash") == 0) {
        /* 50 keys, 40 calls each: every invoker owns some of the keys' arcs. */
        for (int i = 0; i < N; i++)
            if (picked[i] == 0 || picked[i] % 40 != 0)
                plbt_fail(__FILE__, __LINE__,
                          "consistenthash: invoker %" PRIu64 " picked %lld times", IDS[i],
                          picked[i]);
    }
}

/* More invokers than one 64-bit word of the candidate bitset holds. */
static void large_set(const char *name)
{
    enum { BIG = 200 };
    static uint64_t ids[BIG];
    static int32_t weights[BIG];
    static plb_invoker inv[BIG];
    static char addr[BIG][32];
    char config[64];
    for (int i = 0; i < BIG; i++) {
        ids[i] = 1000 + (uint64_t)i;
        weights[i] = 1 + i % 7;
    }
    plbt_invokers(inv, addr, ids, weights, BIG);
    snprintf(config, sizeof config, "loadbalance=%s&seed=4", name);
    plb_balancer *b = plbt_new(config);
    EXPECT_STATUS(plbt_update(b, inv, BIG), PLB_OK);

    const uint64_t cand[] = {1000, 1063, 1064, 1065, 1127, 1128, 1190, 1199};
    const uint64_t excl[] = {1064, 1199, 1500};
    const uint64_t allowed[] = {1000, 1063, 1065, 1127, 1128, 1190};
    uint64_t all_but_one[BIG - 1];
    for (int i = 0, k = 0; i < BIG; i++)
        if (i != 150)
            all_but_one[k++] = ids[i];
    for (int i = 0; i < 200; i++) {
        char key[16];
        int len = snprintf(key, sizeof key, "big-%d", i);
        int64_t id = plb_select_among(b, 0, plbt_u8(key), (size_t)len, cand, 8, excl, 3, 0);
        if (!plbt_contains(allowed, 6, id))
            plbt_fail(__FILE__, __LINE__, "%s: select_among returned %" PRId64, name, id);
        else
            plb_report(b, 0, (uint64_t)id, 100 + i, PLB_OUTCOME_SUCCESS, 0);
        id = plb_select_among(b, 0, plbt_u8(key), (size_t)len, NULL, 0, all_but_one, BIG - 1, 0);
        EXPECT_EQ(id, 1150);
        if (id >= 0)
            plb_report(b, 0, (uint64_t)id, 100 + i, PLB_OUTCOME_FAILURE, 0);
        id = plb_select(b, 0, plbt_u8(key), (size_t)len, 0);
        EXPECT(plbt_contains(ids, BIG, id));
        if (id >= 0)
            plb_report(b, 0, (uint64_t)id, 100 + i, PLB_OUTCOME_TIMEOUT, 0);
    }
    plbt_expect_idle(b, name);

    if (strcmp(name, "random") == 0 || strcmp(name, "leastactive") == 0 ||
        strcmp(name, "p2c") == 0) {
        /* Idle (each call reported before the next), these draw among the candidates left by
         * weight: 1000, 1063, 1065, 1127, 1128, 1190 weigh 1, 1, 3, 2, 3, 2 (of 12), so each
         * count is Binomial(draws, w / 12). Membership alone would pass a pick that always takes
         * the first candidate left, or one that ignores the weights. */
        const int allowed_w[] = {1, 1, 3, 2, 3, 2};
        enum { DRAWS = 6000 };
        int count[6] = {0};
        for (int i = 0; i < DRAWS; i++) {
            int64_t id = plb_select_among(b, 0, NULL, 0, cand, 8, excl, 3, PLBT_T0_US);
            int k = 0;
            while (k < 6 && (int64_t)allowed[k] != id)
                k++;
            if (k == 6) {
                plbt_fail(__FILE__, __LINE__, "%s: select_among returned %" PRId64, name, id);
                continue;
            }
            count[k]++;
            plb_report(b, 0, (uint64_t)id, 100, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
        }
        for (int k = 0; k < 6; k++)
            expect_binomial(count[k], DRAWS, allowed_w[k] / 12.0, name);
        plbt_expect_idle(b, name);
    }
    plb_balancer_free(b);
}

/* Dubbo's smooth weighted round robin: weights 5, 1, 1 give a a b a c a a, then repeat. */
static void roundrobin_sequence(void)
{
    const uint64_t ids[] = {1, 2, 3};
    const int32_t w[] = {5, 1, 1};
    const int64_t expected[] = {1, 1, 2, 1, 3, 1, 1};
    plb_balancer *b = with_set("loadbalance=roundrobin", ids, w, 3);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 7; i++) {
            int64_t id = plb_select(b, 0, NULL, 0, PLBT_T0_US);
            EXPECT_EQ(id, expected[i]);
            if (id >= 0)
                plb_report(b, 0, (uint64_t)id, 1000, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
        }
    plb_balancer_free(b);
}

/* orca deals in turn by the reported capacities (200, 400, 100; the unreported 4 takes their
   mean): the sequence every binding checks too. */
static void orca_sequence(void)
{
    const uint64_t ids[] = {1, 2, 3, 4};
    const int32_t w[] = {100, 100, 100, 100};
    const int64_t expected[] = {2, 4, 1, 2, 4, 2, 1, 2, 3, 4, 2, 1};
    plb_balancer *b = with_set("loadbalance=orca&orca.blackoutMs=0", ids, w, 4);
    EXPECT_STATUS(plb_report_load(b, 1, 100, 0, 0.5, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report_load(b, 2, 100, 0, 0.25, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report_load(b, 3, 100, 50, 0.5, PLBT_T0_US), PLB_OK);
    int counts[5] = {0};
    for (int i = 0; i < 1200; i++) {
        int64_t id = plb_select(b, 0, NULL, 0, PLBT_T0_US);
        if (i < 12)
            EXPECT_EQ(id, expected[i]);
        if (id < 1 || id > 4) {
            plbt_fail(__FILE__, __LINE__, "orca picked %lld", (long long)id);
            break;
        }
        counts[id]++;
        plb_report(b, 0, (uint64_t)id, 1000, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
    }
    EXPECT_EQ(counts[1], 257);
    EXPECT_EQ(counts[2], 515);
    EXPECT_EQ(counts[3], 128);
    EXPECT_EQ(counts[4], 300);
    plb_balancer_free(b);
}

/* Picks of ids 1 and 2 over `draws` selects at `now`: counts[1], counts[2]. */
static void orca_deal(plb_balancer *b, int64_t now, int draws, int counts[3])
{
    counts[1] = counts[2] = 0;
    for (int i = 0; i < draws; i++) {
        int64_t id = plb_select(b, 0, NULL, 0, now);
        if (id < 1 || id > 2) {
            plbt_fail(__FILE__, __LINE__, "orca picked %lld", (long long)id);
            return;
        }
        counts[id]++;
    }
}

/* plb_report_reconnect restarts an invoker's run of load reports (gRFC A58's READY again): its
   weight stops counting at once, and counts again a blackout after its next report. */
static void orca_reconnect_restarts_the_blackout(void)
{
    const uint64_t ids[] = {1, 2};
    const int64_t s = 1000000;
    int c[3];
    plb_balancer *b = with_set("loadbalance=orca&orca.blackoutMs=1000&orca.updateMs=60000",
                               ids, NULL, 2);
    EXPECT_STATUS(plb_report_load(b, 1, 100, 0, 1.0, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report_load(b, 2, 300, 0, 1.0, PLBT_T0_US), PLB_OK);
    orca_deal(b, PLBT_T0_US + s, 400, c);
    EXPECT(abs(c[1] - 100) <= 2 && abs(c[2] - 300) <= 2);
    EXPECT_STATUS(plb_report_reconnect(b, 2, PLBT_T0_US + s), PLB_OK);
    EXPECT_STATUS(plb_report_reconnect(b, 999, PLBT_T0_US + s), PLB_OK); /* not in the set */
    orca_deal(b, PLBT_T0_US + s, 400, c);
    EXPECT(abs(c[1] - 200) <= 2 && abs(c[2] - 200) <= 2);
    EXPECT_STATUS(plb_report_load(b, 2, 300, 0, 1.0, PLBT_T0_US + 2 * s), PLB_OK);
    orca_deal(b, PLBT_T0_US + 2 * s + s / 2, 400, c);
    EXPECT(abs(c[1] - 200) <= 2 && abs(c[2] - 200) <= 2);
    orca_deal(b, PLBT_T0_US + 3 * s, 400, c);
    EXPECT(abs(c[1] - 100) <= 2 && abs(c[2] - 300) <= 2);
    plb_balancer_free(b);

    /* Other strategies accept it and ignore it. */
    b = with_set("loadbalance=roundrobin", ids, NULL, 2);
    EXPECT_STATUS(plb_report_reconnect(b, 1, 0), PLB_OK);
    plb_balancer_free(b);
}

/* The invoker without calls in flight wins while the others have one each. */
static void leastactive_avoids_busy(void)
{
    const uint64_t ids[] = {1, 2, 3};
    const uint64_t one[] = {1}, two[] = {2};
    plb_balancer *b = with_set("loadbalance=leastactive&seed=5", ids, NULL, 3);
    EXPECT_EQ(plb_select_among(b, 0, NULL, 0, one, 1, NULL, 0, PLBT_T0_US), 1);
    EXPECT_EQ(plb_select_among(b, 0, NULL, 0, two, 1, NULL, 0, PLBT_T0_US), 2);
    for (int i = 0; i < 30; i++) {
        int64_t id = plb_select(b, 0, NULL, 0, PLBT_T0_US);
        EXPECT_EQ(id, 3);
        if (id >= 0)
            plb_report(b, 0, (uint64_t)id, 10, PLB_OUTCOME_CANCELLED, PLBT_T0_US);
    }
    /* In-flight counts are per method: another method sees three idle invokers, so its picks
     * are uniform over all three (busy 1 and 2 included), not pushed to 3. */
    uint32_t other = plbt_method(b, "other");
    int seen[4] = {0};
    for (int i = 0; i < 3000; i++) {
        int64_t id = plb_select(b, other, NULL, 0, PLBT_T0_US);
        if (id >= 1 && id <= 3)
            seen[id]++;
        if (id >= 0)
            plb_report(b, other, (uint64_t)id, 10, PLB_OUTCOME_CANCELLED, PLBT_T0_US);
    }
    for (int id = 1; id <= 3; id++)
        expect_binomial(seen[id], 3000, 1.0 / 3, "leastactive, other method");
    EXPECT_STATUS(plb_report(b, 0, 1, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US), PLB_OK);
    EXPECT_STATUS(plb_report(b, 0, 2, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US), PLB_OK);
    plbt_expect_idle(b, "leastactive");
    plb_balancer_free(b);
}

/* A key keeps its invoker: across calls, subsets that contain it, and removal of others. */
static void consistenthash_stable(void)
{
    plb_balancer *b = with_set("loadbalance=consistenthash", IDS, NULL, N);
    int distinct[N] = {0};
    for (int k = 0; k < 40; k++) {
        char key[16];
        int len = snprintf(key, sizeof key, "order-%d", k);
        int64_t first = plb_select(b, 0, plbt_u8(key), (size_t)len, PLBT_T0_US);
        if (!plbt_contains(IDS, N, first)) {
            plbt_fail(__FILE__, __LINE__, "consistenthash: select returned %" PRId64, first);
            continue;
        }
        distinct[first - 11] = 1;
        plb_report(b, 0, (uint64_t)first, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
        for (int i = 0; i < 3; i++) {
            int64_t again = plb_select(b, 0, plbt_u8(key), (size_t)len, PLBT_T0_US);
            EXPECT_EQ(again, first);
            plb_report(b, 0, (uint64_t)again, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
        }
        uint64_t with_first[2] = {(uint64_t)first, first == 11 ? 15 : 11};
        int64_t sub = plb_select_among(b, 0, plbt_u8(key), (size_t)len, with_first, 2, NULL, 0,
                                       PLBT_T0_US);
        EXPECT_EQ(sub, first);
        plb_report(b, 0, (uint64_t)sub, 10, PLB_OUTCOME_CANCELLED, PLBT_T0_US);
        uint64_t ex[1] = {(uint64_t)first};
        int64_t other = plb_select_among(b, 0, plbt_u8(key), (size_t)len, NULL, 0, ex, 1,
                                         PLBT_T0_US);
        EXPECT(plbt_contains(IDS, N, other) && other != first);
        if (other >= 0)
            plb_report(b, 0, (uint64_t)other, 10, PLB_OUTCOME_CANCELLED, PLBT_T0_US);
    }
    int spread = 0;
    for (int i = 0; i < N; i++)
        spread += distinct[i];
    EXPECT(spread >= 3);

    /* Removing another invoker does not move this key. */
    int64_t before = plb_select(b, 0, plbt_u8("order-7"), 7, PLBT_T0_US);
    plb_report(b, 0, (uint64_t)before, 10, PLB_OUTCOME_CANCELLED, PLBT_T0_US);
    uint64_t rest[N - 1];
    size_t r = 0;
    for (int i = 0; i < N; i++)
        if ((int64_t)IDS[i] != before && r < N - 1)
            rest[r++] = IDS[i];
    /* keep `before` plus three others: drop the last of the others */
    uint64_t kept[N - 1] = {(uint64_t)before, rest[0], rest[1], rest[2]};
    plb_invoker inv[N - 1];
    char addr[N - 1][32];
    plbt_invokers(inv, addr, kept, NULL, N - 1);
    EXPECT_STATUS(plbt_update(b, inv, N - 1), PLB_OK);
    EXPECT_EQ(plb_select(b, 0, plbt_u8("order-7"), 7, PLBT_T0_US), before);
    plb_report(b, 0, (uint64_t)before, 10, PLB_OUTCOME_CANCELLED, PLBT_T0_US);
    plbt_expect_idle(b, "consistenthash");
    plb_balancer_free(b);
}

/* Weighted random never picks a zero-weight invoker among positive ones. */
static void random_weights(void)
{
    const uint64_t ids[] = {1, 2, 3};
    const int32_t w[] = {0, 100, 300};
    int seen[4] = {0};
    plb_balancer *b = with_set("loadbalance=random&seed=6", ids, w, 3);
    for (int i = 0; i < 20000; i++) {
        int64_t id = plb_select(b, 0, NULL, 0, PLBT_T0_US);
        if (id >= 1 && id <= 3)
            seen[id]++;
        else
            plbt_fail(__FILE__, __LINE__, "random: select returned %" PRId64, id);
        if (id >= 0)
            plb_report(b, 0, (uint64_t)id, 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US);
    }
    EXPECT_EQ(seen[1], 0);
    /* 3:1 odds: id 3's count is Binomial(20000, 3/4), within 5 sd (5 * 61) of 15000. */
    expect_binomial(seen[3], 20000, 0.75, "random, weight 300 of 400");
    plb_balancer_free(b);
}

/* The invoker answering fastest wins while both have the same calls in flight. */
static void shortestresponse_prefers_fast(void)
{
    const uint64_t ids[] = {1, 2};
    const uint64_t fast[] = {1}, slow[] = {2};
    plb_balancer *b = with_set("loadbalance=shortestresponse", ids, NULL, 2);
    for (int i = 0; i < 10; i++) {
        EXPECT_EQ(plb_select_among(b, 0, NULL, 0, fast, 1, NULL, 0, PLBT_T0_US), 1);
        EXPECT_STATUS(plb_report(b, 0, 1, 2000, PLB_OUTCOME_SUCCESS, PLBT_T0_US), PLB_OK);
        EXPECT_EQ(plb_select_among(b, 0, NULL, 0, slow, 1, NULL, 0, PLBT_T0_US), 2);
        EXPECT_STATUS(plb_report(b, 0, 2, 50000, PLB_OUTCOME_SUCCESS, PLBT_T0_US), PLB_OK);
    }
    for (int i = 0; i < 30; i++) {
        int64_t id = plb_select(b, 0, NULL, 0, PLBT_T0_US + 1000);
        EXPECT_EQ(id, 1);
        if (id >= 0)
            plb_report(b, 0, (uint64_t)id, 0, PLB_OUTCOME_CANCELLED, PLBT_T0_US + 1000);
    }
    plb_balancer_free(b);
}

/*
 * Warm-up through the struct's start_time_ms / warmup_ms fields (so their layout is checked):
 * 60 s into a 600 s warm-up, weight 100 counts as 10; with the balancer default (warmup_ms < 0,
 * config warmup=120000) as 50. The zone and address come back in the stats JSON.
 */
static void warmup_and_fields(void)
{
    const int64_t now_ms = PLBT_T0_US / 1000;
    plb_invoker inv[3];
    inv[0] = plbt_inv(1, "10.1.0.1:20880", 100);
    inv[0].start_time_ms = now_ms - 60000;
    inv[0].warmup_ms = 600000;
    inv[1] = plbt_inv(2, "10.1.0.2:20880", 100);
    inv[1].start_time_ms = now_ms - 60000;
    inv[1].warmup_ms = -1;
    inv[1].zone = plbt_u8("eu-west-1a");
    inv[1].zone_len = strlen("eu-west-1a");
    inv[2] = plbt_inv(3, "10.1.0.3:20880", 7);
    plb_balancer *b = plbt_new("loadbalance=random&warmup=120000");
    EXPECT_STATUS(plbt_update(b, inv, 3), PLB_OK);
    plbt_row rows[3];
    EXPECT_EQ(plbt_stats(b, PLBT_T0_US, rows, 3, NULL, 0), 3);
    EXPECT_EQ(rows[0].weight, 100);
    EXPECT_EQ(rows[0].effective_weight, 10);
    EXPECT_EQ(rows[1].effective_weight, 50);
    EXPECT_EQ(rows[2].weight, 7);
    EXPECT_EQ(rows[2].effective_weight, 7);
    /* Fully warm 10 minutes later. */
    plbt_stats(b, PLBT_T0_US + INT64_C(600000000), rows, 3, NULL, 0);
    EXPECT_EQ(rows[0].effective_weight, 100);
    EXPECT_EQ(rows[1].effective_weight, 100);
    char *json = plbt_stats_json(b, PLBT_T0_US);
    EXPECT(json != NULL && strstr(json, "\"zone\":\"eu-west-1a\"") != NULL);
    EXPECT(json != NULL && strstr(json, "\"address\":\"10.1.0.3:20880\"") != NULL);
    free(json);
    plb_balancer_free(b);
}

/*
 * plb_select32 / plb_report32 against plb_select / plb_report on twin seeded balancers: the same
 * picks, ids above 2^32 split and joined back, and identical counters afterwards.
 */
static void narrow_entry_points(const char *config)
{
    enum { SET = 12, CALLS = 3000, HELD = 5 };
    plb_balancer *wide = plbt_new(config), *narrow = plbt_new(config);
    uint64_t ids[SET];
    int32_t weights[SET];
    char addr[SET][32];
    plb_invoker inv[SET];
    for (size_t i = 0; i < SET; i++) {
        ids[i] = (UINT64_C(7) << 40) + i * UINT64_C(0x100000001); /* both halves differ */
        weights[i] = (int32_t)(10 + 15 * (i % 4));
    }
    plbt_invokers(inv, addr, ids, weights, SET);
    EXPECT_STATUS(plbt_update(wide, inv, SET), PLB_OK);
    EXPECT_STATUS(plbt_update(narrow, inv, SET), PLB_OK);
    int64_t held[HELD] = {0};
    for (int k = 0; k < CALLS; k++) {
        uint8_t key[8];
        memcpy(key, &k, sizeof k);
        memset(key + sizeof k, 0, sizeof key - sizeof k);
        int64_t a = plb_select(wide, 0, key, sizeof key, 0);
        int64_t b = plb_select32(narrow, 0, key, sizeof key);
        EXPECT_EQ(b, a);
        if (a < 0 || b != a)
            break;
        /* Keep a few calls in flight, so that leastactive's choices depend on the reports. */
        int64_t done = held[k % HELD];
        held[k % HELD] = a;
        if (done == 0)
            continue;
        uint32_t elapsed = (uint32_t)(100 + k % 900);
        int32_t outcome = k % 7 == 0 ? PLB_OUTCOME_FAILURE : PLB_OUTCOME_SUCCESS;
        EXPECT_STATUS(plb_report(wide, 0, (uint64_t)done, elapsed, outcome, 0), PLB_OK);
        EXPECT_STATUS(plb_report32(narrow, 0, (uint32_t)((uint64_t)done >> 32), (uint32_t)done,
                                   elapsed, outcome),
                      PLB_OK);
    }
    /* The largest elapsed time the narrow call can carry is accepted as such. */
    EXPECT_STATUS(plb_report(wide, 0, ids[0], INT64_C(4294967295), PLB_OUTCOME_SUCCESS, 0), PLB_OK);
    EXPECT_STATUS(plb_report32(narrow, 0, (uint32_t)(ids[0] >> 32), (uint32_t)ids[0],
                               UINT32_MAX, PLB_OUTCOME_SUCCESS),
                  PLB_OK);
    char *a = plbt_stats_json(wide, PLBT_T0_US), *b = plbt_stats_json(narrow, PLBT_T0_US);
    if (a != NULL && b != NULL && strcmp(a, b) != 0)
        plbt_fail(__FILE__, __LINE__, "%s: stats differ:\n  %s\n  %s", config, a, b);
    free(a);
    free(b);
    /* Errors as the wide calls report them. */
    EXPECT_STATUS(plb_select32(narrow, 99, NULL, 0), -PLB_ERR_UNKNOWN_METHOD);
    EXPECT_STATUS(plb_report32(narrow, 99, 0, 1, 10, PLB_OUTCOME_SUCCESS), PLB_ERR_UNKNOWN_METHOD);
    EXPECT_STATUS(plb_report32(narrow, 0, 0, 1, 10, 4), PLB_ERR_UNKNOWN_OUTCOME);
    EXPECT_STATUS(plb_select32(narrow, 0, NULL, 5), -PLB_ERR_NULL_POINTER);
    plb_balancer_free(wide);
    plb_balancer_free(narrow);
}

int main(void)
{
    char names[PLBT_MAX_STRATEGIES][32];
    size_t n = plbt_strategies(names, PLBT_MAX_STRATEGIES);
    for (size_t i = 0; i < n; i++) {
        int before = plbt_failures;
        generic(names[i]);
        large_set(names[i]);
        printf("  %-18s %s\n", names[i], plbt_failures == before ? "ok" : "FAILED");
    }
    roundrobin_sequence();
    orca_sequence();
    orca_reconnect_restarts_the_blackout();
    leastactive_avoids_busy();
    consistenthash_stable();
    random_weights();
    shortestresponse_prefers_fast();
    warmup_and_fields();
    narrow_entry_points("loadbalance=random&seed=7");
    narrow_entry_points("loadbalance=leastactive&seed=7");
    narrow_entry_points("loadbalance=roundrobin");
    narrow_entry_points("loadbalance=consistenthash");
    return plbt_exit_code("test_strategies");
}
