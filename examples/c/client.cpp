/*
 * client.c in C++17 with include/polylb.hpp: the same steps, with a balancer that frees itself,
 * errors that carry the library's message, and a Call that reports itself exactly once.
 *
 * Build and run: make -C examples/c run-cpp   (see README.md)
 */
#include <polylb.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main()
{
    try {
        // 1. Create: the config is Dubbo URL parameters; a misspelled key throws polylb::Error
        //    naming it (Balancer::create returns a Status instead, for code without exceptions).
        polylb::Balancer lb("loadbalance=leastactive");

        // 2. Register the providers (the library copies them; ids are yours).
        std::vector<polylb::Invoker> providers = {
            {1, "10.0.0.1:20880"}, {2, "10.0.0.2:20880"}, {3, "10.0.0.3:20880", 200}};
        lb.update(providers).check();

        // 3. Intern the method name once; use the id on every call.
        polylb::Method say_hello = lb.method("sayHello");

        // 4. Per call: a Call selects now and reports when finished, with the time since the
        //    select; one that ends unfinished is reported too, so no pick stays in flight: a
        //    Failure if an exception unwinds it, else (an early return) Cancelled.
        for (int n = 0; n < 6; n++) {
            polylb::Call call = lb.call(say_hello);
            std::uint64_t id = call.check(); // throws if the set is empty
            // ... send the RPC to providers[id - 1].address here; say every third call fails ...
            bool failed = n % 3 == 2;
            (void)call.finish(failed ? polylb::Outcome::Failure : polylb::Outcome::Success);
            std::printf("call %d -> provider %llu%s\n", n, static_cast<unsigned long long>(id),
                        failed ? " (failed)" : "");
            if (failed) {
                // Failover: retry once on any other provider.
                polylb::Call retry = lb.call_among(say_hello, {}, {}, {id});
                if (retry) {
                    std::printf("        retried on provider %llu\n",
                                static_cast<unsigned long long>(retry.id()));
                    (void)retry.finish(polylb::Outcome::Success);
                }
            }
        }

        // 5. Stats as JSON.
        std::string json;
        lb.stats(json).check();
        std::printf("%s\n", json.c_str());
    } catch (const polylb::Error &e) {
        std::fprintf(stderr, "polylb: %s\n", e.what());
        return 1;
    }
    // 6. The balancer is freed as it leaves its scope, after every call on it has returned.
    return 0;
}
