/*
 * The cost of include/polylb.hpp over the C calls it wraps: select + report as C calls
 * (plb_select, plb_report), as polylb::Balancer calls, and as a polylb::Call (select, then
 * finish, which also reads the steady clock twice), on one balancer, rounds interleaved so a
 * slow moment of the machine hits all three; the median of 9 rounds of 10^6 pairs each.
 *
 * make -C examples/c run-bench-cpp   (LINK=static works too)
 */
#include <polylb.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {
constexpr int kIters = 1000000;
constexpr int kRounds = 9;

template <class F>
double ns_per_pair(F pair)
{
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; i++)
        pair();
    std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
    return d.count() / kIters;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
} // namespace

int main()
{
    std::uint64_t sink = 0;
    std::printf("%-12s %4s %10s %10s %7s %10s %7s\n", "strategy", "n", "C ns", "C++ ns", "C++/C",
                "Call ns", "Call/C");
    for (const char *strategy : {"random", "leastactive"}) {
        for (int n : {10, 100}) {
            polylb::Balancer lb(std::string("loadbalance=") + strategy);
            std::vector<polylb::Invoker> set;
            for (int i = 0; i < n; i++)
                set.emplace_back(i + 1, "10.0." + std::to_string(i / 256) + "." +
                                            std::to_string(i % 256) + ":20880",
                                 50 * (1 + i % 4));
            lb.update(set).check();
            const plb_balancer *c = lb.get();
            auto c_pair = [&] {
                int64_t id = plb_select(c, 0, nullptr, 0, 0);
                plb_report(c, 0, static_cast<std::uint64_t>(id), 1000, PLB_OUTCOME_SUCCESS, 0);
                sink += static_cast<std::uint64_t>(id);
            };
            auto cpp_pair = [&] {
                polylb::Selection s = lb.select();
                (void)lb.report(0, s.id(), std::chrono::microseconds(1000),
                                polylb::Outcome::Success);
                sink += s.id();
            };
            auto call_pair = [&] {
                polylb::Call call = lb.call();
                sink += call.id();
                (void)call.finish(polylb::Outcome::Success);
            };
            std::vector<double> tc, tp, tk;
            ns_per_pair(c_pair); // warm-up
            for (int r = 0; r < kRounds; r++) {
                tc.push_back(ns_per_pair(c_pair));
                tp.push_back(ns_per_pair(cpp_pair));
                tk.push_back(ns_per_pair(call_pair));
            }
            double mc = median(tc), mp = median(tp), mk = median(tk);
            std::printf("%-12s %4d %10.2f %10.2f %6.2fx %10.2f %6.2fx\n", strategy, n, mc, mp,
                        mp / mc, mk, mk / mc);
        }
    }
    return sink == 42 ? 1 : 0;
}
