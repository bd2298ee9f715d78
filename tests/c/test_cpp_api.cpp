/*
 * include/polylb.hpp, the C++17 layer: errors with the library's messages, exceptions from
 * check(), rejected updates that change nothing, selects and reports, Call's exactly-once
 * report (also on an early exit or an exception), moves, and concurrent calls during updates.
 */
#include "plb_test.h"
#include "polylb.hpp"

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

using polylb::Balancer;
using polylb::Outcome;
using std::chrono::microseconds;

static bool contains(const std::string &text, const char *part)
{
    return text.find(part) != std::string::npos;
}

static std::vector<polylb::Invoker> set_of(std::initializer_list<std::uint64_t> ids)
{
    std::vector<polylb::Invoker> set;
    for (std::uint64_t id : ids)
        set.emplace_back(id, "10.0.0." + std::to_string(id) + ":20880");
    return set;
}

/* Calls in flight summed over the listed invokers, and their successes. */
static long long total(const Balancer &lb, long long plbt_row::*field)
{
    plbt_row rows[64];
    size_t n = plbt_stats(lb.get(), PLBT_T0_US, rows, 64, NULL, 0);
    long long sum = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        sum += rows[i].*field;
    return sum;
}

/* Misuse refused at compile time: an id list that would dangle, the id of a Call that ends in
 * the same expression. */
static_assert(!std::is_constructible_v<polylb::Ids, std::vector<std::uint64_t> &&>);
static_assert(!std::is_constructible_v<polylb::Ids, std::array<std::uint64_t, 2> &&>);
static_assert(std::is_constructible_v<polylb::Ids, const std::vector<std::uint64_t> &>);
template <class T, class = void> struct has_id : std::false_type {};
template <class T> struct has_id<T, std::void_t<decltype(std::declval<T>().id())>> : std::true_type {};
static_assert(!has_id<polylb::Call>::value, "Call::id() on a temporary");
static_assert(has_id<polylb::Call &>::value);
static_assert(has_id<polylb::Selection>::value);

/* An integer field of the stats JSON, the first after `after` (or anywhere). */
static long long json_field(const std::string &json, const char *name, const char *after = "")
{
    size_t from = json.find(after);
    if (from == std::string::npos)
        return -1;
    return plbt_field(json.c_str() + from, json.c_str() + json.size(), name, -1);
}

static void config_errors_carry_the_library_message()
{
    Balancer lb;
    polylb::Status s = Balancer::create("loadbalance=roundrobin&warmpu=1", lb);
    EXPECT(!s.ok());
    EXPECT_STATUS(s.code(), PLB_ERR_INVALID_CONFIG);
    EXPECT(contains(s.message(), "warmpu"));
    EXPECT(contains(s.message(), "warmup")); /* the nearest valid key */
    EXPECT(!lb);                             /* left as it was */
    try {
        Balancer bad("loadbalance=fastest");
        plbt_fail(__FILE__, __LINE__, "a rejected config constructed a balancer");
    } catch (const polylb::Error &e) {
        EXPECT_STATUS(e.code(), PLB_ERR_INVALID_CONFIG);
        EXPECT(contains(e.what(), "fastest"));
    }
    /* A message longer than a first buffer (1 KB) arrives whole: a long key is quoted up to 512
     * characters, then the valid keys are listed. */
    std::string long_key(3000, 'x');
    s = Balancer::create("loadbalance=random&" + long_key + "=1", lb);
    EXPECT_STATUS(s.code(), PLB_ERR_INVALID_CONFIG);
    EXPECT(contains(s.message(), (long_key.substr(0, 512) + "\xe2\x80\xa6' (3000 bytes)").c_str()));
    EXPECT(contains(s.message(), "orca.errorPenalty)"));
    EXPECT(s.message().size() > 1024);
    /* Also when the first buffer's cut falls inside a multi-byte character, which leaves a few
     * bytes of it unused: the whole message ends with the list of valid keys. */
    std::string accented_key = "x";
    for (int i = 0; i < 600; i++)
        accented_key += "\xc3\xa9";
    s = Balancer::create(accented_key + "=1", lb);
    EXPECT(contains(s.message(), accented_key.substr(0, 1 + 511 * 2).c_str()));
    EXPECT(contains(s.message(), "orca.errorPenalty"));
    EXPECT(Balancer::create("", lb).ok());
    EXPECT(static_cast<bool>(lb));
}

/* Codes built by hand beyond any status (the library returns none) are never read as PLB_OK,
 * and negating them is no undefined behaviour (the test runs under -fsanitize=undefined). */
static void codes_beyond_any_status_stay_errors()
{
    EXPECT_EQ(polylb::Status(-PLB_ERR_NO_PROVIDER).code(), PLB_ERR_NO_PROVIDER);
    EXPECT(!polylb::Status(INT32_MIN).ok());
    EXPECT_EQ(polylb::Status(INT32_MIN).code(), INT32_MAX);
    for (std::int64_t raw : {std::int64_t{INT64_MIN}, -(std::int64_t{1} << 32), std::int64_t{INT32_MIN}}) {
        polylb::Selection selection(raw);
        EXPECT(!selection.ok());
        EXPECT(!selection.status().ok());
        try {
            (void)selection.check();
            plbt_fail(__FILE__, __LINE__, "check() of an error returned an id");
        } catch (const polylb::Error &e) {
            EXPECT(e.code() != PLB_OK);
        }
    }
    EXPECT_EQ(polylb::Selection(-PLB_ERR_NO_CANDIDATE).status().code(), PLB_ERR_NO_CANDIDATE);
}

/* Every field of an Invoker and every now_us reaches the library. */
static void invoker_fields_and_times_reach_the_library()
{
    const std::int64_t t0_ms = PLBT_T0_US / 1000;
    Balancer lb("loadbalance=random&seed=11&zone=z1");
    std::vector<polylb::Invoker> set = {{1, "10.0.0.1:20880"}, {2, "10.0.0.2:20880"},
                                        {3, "10.0.0.3:20880"}, {4, "10.0.0.4:20880"}};
    set[0].zone = set[1].zone = "z1";
    set[2].zone = set[3].zone = "z2";
    /* Invoker 1 started a minute before T0 with a 10-minute warm-up: a tenth of its weight. */
    set[0].start_time_ms = t0_ms - 60000;
    set[0].warmup_ms = 600000;
    EXPECT(lb.update(set).ok());
    std::string json;
    EXPECT(lb.stats(json, PLBT_T0_US).ok());
    EXPECT_EQ(json_field(json, "effective_weight", "\"id\":1,"), 10);
    EXPECT_EQ(json_field(json, "start_time_ms", "\"id\":1,"), t0_ms - 60000);
    EXPECT_EQ(json_field(json, "warmup_ms", "\"id\":1,"), 600000);
    int local = 0, warming = 0;
    const int draws = 4000;
    for (int i = 0; i < draws; i++) {
        polylb::Selection s = i % 2 ? lb.select(0, {}, PLBT_T0_US)
                                    : lb.select_among(0, {}, {}, {}, PLBT_T0_US);
        local += s.id() == 1 || s.id() == 2; /* zone z1 preferred */
        warming += s.id() == 1;
        EXPECT(lb.report(0, s.id(), microseconds(100), Outcome::Success, PLBT_T0_US).ok());
    }
    EXPECT_EQ(local, draws);
    /* 10 : 100 at T0, so about 9 % (sigma 0.45 %); fully warm (the library's own clock, years
     * later) it would be 50 %. */
    EXPECT(warming > draws * 6 / 100 && warming < draws * 12 / 100);
}

static void round_robin_follows_weights()
{
    Balancer lb("loadbalance=roundrobin");
    std::vector<polylb::Invoker> set = {{1, "10.0.0.1:20880", 300}, {2, "10.0.0.2:20880", 100}};
    EXPECT(lb.update(set).ok());
    const std::uint64_t want[] = {1, 1, 2, 1, 1, 1, 2, 1};
    for (std::uint64_t w : want) {
        polylb::Selection s = lb.select(0, {}, PLBT_T0_US);
        EXPECT(s.ok());
        EXPECT_EQ(s.id(), w);
        EXPECT(lb.report(0, s.id(), microseconds(250), Outcome::Success, PLBT_T0_US).ok());
    }
    plbt_expect_idle(lb.get(), "round robin");
}

static void rejected_updates_change_nothing()
{
    Balancer lb("loadbalance=random&seed=7");
    EXPECT(lb.update(set_of({1, 2, 3})).ok());
    const uint64_t ids[] = {1, 2, 3};

    std::vector<polylb::Invoker> negative = set_of({4, 5});
    negative[1].weight = -1;
    polylb::Status s = lb.update(negative);
    EXPECT_STATUS(s.code(), PLB_ERR_NEGATIVE_WEIGHT);
    EXPECT(s.message().size() > strlen(plb_status_str(PLB_ERR_NEGATIVE_WEIGHT)));
    plbt_expect_set(lb.get(), ids, 3, "after a negative weight");

    EXPECT_STATUS(lb.update(set_of({4, 4})).code(), PLB_ERR_DUPLICATE_ID);
    plbt_expect_set(lb.get(), ids, 3, "after a duplicate id");

    std::vector<polylb::Invoker> zoned = set_of({1, 2});
    zoned[0].zone = "z1";
    EXPECT(lb.update(zoned).ok());
    EXPECT(lb.update({}).ok()); /* an empty set is accepted */
    polylb::Selection none = lb.select();
    EXPECT(!none);
    EXPECT_STATUS(none.status().code(), PLB_ERR_NO_PROVIDER);
    try {
        (void)none.check();
        plbt_fail(__FILE__, __LINE__, "check() on a failed select did not throw");
    } catch (const polylb::Error &e) {
        EXPECT_STATUS(e.code(), PLB_ERR_NO_PROVIDER);
    }
}

static void methods_are_interned()
{
    Balancer lb("loadbalance=roundrobin");
    polylb::Method hello = lb.method("sayHello");
    EXPECT_EQ(lb.method("sayHello"), hello);
    EXPECT(lb.method("sayBye") != hello);
    EXPECT_EQ(lb.method(""), 0);
    polylb::Method m = 99;
    EXPECT_STATUS(lb.method(std::string_view("\xff\xfe", 2), m).code(), PLB_ERR_INVALID_UTF8);
    EXPECT_EQ(m, 99);
}

static void select_among_and_reports()
{
    Balancer lb("loadbalance=random&seed=3");
    EXPECT(lb.update(set_of({1, 2, 3})).ok());
    std::vector<std::uint64_t> candidates = {1, 2, 3};
    std::array<std::uint64_t, 2> tried = {1, 2};
    for (int i = 0; i < 50; i++) {
        polylb::Selection s = lb.select_among(0, {}, candidates, tried);
        EXPECT_EQ(s.check(), 3);
        EXPECT(lb.report(0, s.id(), microseconds(0), Outcome::Cancelled).ok());
        polylb::Selection t = lb.select_among(0, {}, {}, {3});
        EXPECT(t.ok() && t.id() != 3);
        EXPECT(lb.report(0, t.id(), microseconds(0), Outcome::Cancelled).ok());
    }
    for (int i = 0; i < 20; i++) {
        polylb::Call retry = lb.call_among(0, {}, candidates, tried);
        EXPECT_EQ(retry.check(), 3);
    }
    EXPECT_STATUS(lb.call_among(0, {}, {1}, {1}).status().code(), PLB_ERR_NO_CANDIDATE);
    EXPECT_STATUS(lb.select_among(0, {}, {1, 2}, {1, 2}).status().code(), PLB_ERR_NO_CANDIDATE);
    EXPECT_STATUS(lb.select_among(0, {}, {9}, {}).status().code(), PLB_ERR_UNKNOWN_CANDIDATE);
    EXPECT_STATUS(lb.report(0, 1, microseconds(-1), Outcome::Success).code(),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT(lb.report(0, 42, microseconds(5), Outcome::Success).ok()); /* departed: ignored */
    EXPECT_STATUS(lb.report_provider_metrics(0, 1, 1, -1.0, microseconds(1)).code(),
                  PLB_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(lb.report_load(1, 10.0, 20.0, 0.5).code(), PLB_ERR_INVALID_ARGUMENT);
    EXPECT(lb.report_load(1, 10.0, 1.0, 0.5).ok()); /* checked, then ignored by this strategy */
    EXPECT(lb.report_reconnect(1).ok());             /* ignored by this strategy */
    plbt_expect_idle(lb.get(), "select_among");

    /* Hash keys as string_view: the C++ call picks what the C call picks. */
    Balancer ring("loadbalance=consistenthash");
    EXPECT(ring.update(set_of({1, 2, 3, 4})).ok());
    for (int i = 0; i < 64; i++) {
        std::string key = "user-" + std::to_string(i);
        polylb::Selection s = ring.select(0, key);
        int64_t c = plb_select(ring.get(), 0, plbt_u8(key.c_str()), key.size(), 0);
        EXPECT_EQ(s.check(), c);
        EXPECT(ring.report(0, s.id(), microseconds(0), Outcome::Cancelled).ok());
        EXPECT_STATUS(plb_report(ring.get(), 0, (uint64_t)c, 0, PLB_OUTCOME_CANCELLED, 0), PLB_OK);
    }
    std::string json;
    EXPECT(ring.stats(json).ok());
    EXPECT(contains(json, "\"strategy\":\"consistenthash\""));
}

static void a_call_is_reported_exactly_once()
{
    Balancer lb("loadbalance=leastactive");
    EXPECT(lb.update(set_of({1, 2})).ok());
    {
        polylb::Call first = lb.call();
        EXPECT(first.ok());
        EXPECT_EQ(total(lb, &plbt_row::active), 1);
        /* leastactive sees it: the next call goes to the other, idle invoker. */
        polylb::Call second = lb.call();
        EXPECT(second.ok() && second.id() != first.id());
        EXPECT(first.finish(Outcome::Success).ok());
        EXPECT(first.finish(Outcome::Failure).ok()); /* only the first finish reports */
        EXPECT_EQ(total(lb, &plbt_row::succeeded), 1);
        EXPECT_EQ(total(lb, &plbt_row::failures), 0);
        EXPECT_EQ(total(lb, &plbt_row::active), 1);
    } /* second ends unfinished: Cancelled */
    EXPECT_EQ(total(lb, &plbt_row::active), 0);
    EXPECT_EQ(total(lb, &plbt_row::succeeded), 1);
    EXPECT_EQ(total(lb, &plbt_row::failures), 0);

    /* An exception thrown during the call (a refused connection, say) is a failure, as an
     * exception leaving Python's `with lb.call()` block is; one already in flight when the call
     * was made (a Call made in a catch handler or a destructor) is not this call's. */
    try {
        polylb::Call call = lb.call();
        EXPECT_EQ(total(lb, &plbt_row::active), 1);
        throw std::runtime_error("connection refused");
    } catch (const std::runtime_error &) {
    }
    EXPECT_EQ(total(lb, &plbt_row::active), 0);
    EXPECT_EQ(total(lb, &plbt_row::failures), 1);
    struct CallsWhileUnwinding {
        const Balancer &lb;
        ~CallsWhileUnwinding() { polylb::Call early_return = lb.call(); }
    };
    try {
        CallsWhileUnwinding during{lb};
        throw std::runtime_error("another error");
    } catch (const std::runtime_error &) {
    }
    EXPECT_EQ(total(lb, &plbt_row::active), 0);
    EXPECT_EQ(total(lb, &plbt_row::failures), 1);

    {
        polylb::Call failed = lb.call();
        EXPECT(failed.finish(Outcome::Timeout).ok());
    }
    EXPECT_EQ(total(lb, &plbt_row::failures), 2);
    EXPECT_EQ(total(lb, &plbt_row::timeouts), 1);

    /* An outcome that is no Outcome: refused, and the call still ends (as cancelled). */
    {
        polylb::Call odd = lb.call();
        EXPECT_STATUS(odd.finish(static_cast<Outcome>(7)).code(), PLB_ERR_UNKNOWN_OUTCOME);
        EXPECT_EQ(total(lb, &plbt_row::active), 0);
    }
    /* A moved-from Call holds nothing. */
    {
        polylb::Call from = lb.call();
        polylb::Call to = std::move(from);
        EXPECT(!from);
        EXPECT_STATUS(from.status().code(), PLB_ERR_NULL_POINTER);
        EXPECT(from.finish(Outcome::Success).ok());
        EXPECT_EQ(total(lb, &plbt_row::active), 1);
    }
    EXPECT_EQ(total(lb, &plbt_row::active), 0);
    EXPECT_EQ(total(lb, &plbt_row::succeeded), 1);

    /* The time a Call measures reaches the balancer. */
    {
        Balancer timed("loadbalance=shortestresponse");
        EXPECT(timed.update(set_of({1})).ok());
        polylb::Call call = timed.call();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT(call.finish(Outcome::Success).ok());
        std::string json;
        EXPECT(timed.stats(json).ok());
        long long mean = json_field(json, "mean_success_us");
        EXPECT(mean >= 20000 && mean < 1000000);
    }
    /* A Call's key is the select's. */
    {
        Balancer ring("loadbalance=consistenthash");
        EXPECT(ring.update(set_of({1, 2, 3, 4})).ok());
        for (int i = 0; i < 32; i++) {
            std::string key = "user-" + std::to_string(i);
            polylb::Call call = ring.call(0, key);
            int64_t c = plb_select(ring.get(), 0, plbt_u8(key.c_str()), key.size(), 0);
            EXPECT_EQ(call.check(), c);
            EXPECT_STATUS(plb_report(ring.get(), 0, (uint64_t)c, 0, PLB_OUTCOME_CANCELLED, 0),
                          PLB_OK);
        }
    }

    /* Moved calls report once, from their last owner; so do calls of a moved balancer. */
    std::vector<polylb::Call> open;
    for (int i = 0; i < 5; i++)
        open.push_back(lb.call());
    EXPECT_EQ(total(lb, &plbt_row::active), 5);
    Balancer moved = std::move(lb);
    open.clear();
    EXPECT_EQ(total(moved, &plbt_row::active), 0);
    EXPECT_EQ(total(moved, &plbt_row::selected), 12);

    Balancer empty("loadbalance=leastactive");
    polylb::Call nothing = empty.call();
    EXPECT(!nothing);
    EXPECT_STATUS(nothing.status().code(), PLB_ERR_NO_PROVIDER);
    EXPECT(nothing.finish(Outcome::Success).ok());
}

static void moves_transfer_the_balancer()
{
    Balancer a("loadbalance=random");
    EXPECT(a.update(set_of({1})).ok());
    Balancer b = std::move(a);
    EXPECT(!a);
    EXPECT_STATUS(a.select().status().code(), PLB_ERR_NULL_POINTER);
    EXPECT_STATUS(a.update(set_of({1})).code(), PLB_ERR_NULL_POINTER);
    EXPECT_EQ(b.select().check(), 1);
    Balancer c("loadbalance=roundrobin");
    c = std::move(b); /* frees c's own balancer (ASan and valgrind check the leak) */
    EXPECT(!b);
    std::string json;
    EXPECT(c.stats(json).ok());
    EXPECT(contains(json, "\"strategy\":\"random\""));
    EXPECT(contains(json, "\"active\":1"));
}

static void concurrent_calls_during_updates()
{
    Balancer lb("loadbalance=leastactive");
    EXPECT(lb.update(set_of({1, 2, 3, 4})).ok());
    std::atomic<bool> stop{false};
    std::atomic<long> failed_selects{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; t++)
        callers.emplace_back([&, t] {
            polylb::Method m = lb.method(t % 2 ? "odd" : "even");
            for (int i = 0; i < 20000; i++) {
                polylb::Call call = lb.call(m);
                if (!call) {
                    failed_selects++;
                    continue;
                }
                if (i % 3 == 0)
                    (void)call.finish(i % 2 ? Outcome::Failure : Outcome::Success);
            }
        });
    std::thread updater([&] {
        for (int i = 0; i < 2000 && !stop; i++)
            EXPECT(lb.update(i % 2 ? set_of({2, 3, 4, 5}) : set_of({1, 2, 3, 4})).ok());
    });
    for (std::thread &t : callers)
        t.join();
    stop = true;
    updater.join();
    EXPECT_EQ(failed_selects.load(), 0);
    plbt_expect_idle(lb.get(), "after concurrent calls and updates");
}

int main(void)
{
    EXPECT(std::string(polylb::version()) == plb_version());
    EXPECT_EQ(polylb::abi_version(), PLB_ABI_VERSION);
    config_errors_carry_the_library_message();
    codes_beyond_any_status_stay_errors();
    round_robin_follows_weights();
    rejected_updates_change_nothing();
    invoker_fields_and_times_reach_the_library();
    methods_are_interned();
    select_among_and_reports();
    a_call_is_reported_exactly_once();
    moves_transfer_the_balancer();
    concurrent_calls_during_updates();
    return plbt_exit_code("test_cpp_api");
}
