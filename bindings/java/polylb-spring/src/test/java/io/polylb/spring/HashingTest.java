package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.client.loadbalancer.LoadBalancerClient;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.web.client.RestClient;
import org.springframework.web.reactive.function.client.WebClient;

/** The hashing strategies get the key named by hash-key from each request Spring's clients send. */
class HashingTest extends LocalServers {
    private List<Backend> backends(String serviceId, int n) throws Exception {
        List<Backend> list = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            list.add(backend("i" + i, 200, 0));
        }
        TestApp.DISCOVERY.put(serviceId, list.stream().map(b -> b.instance(serviceId)).toList());
        return list;
    }

    private static String viaRest(RestClient rest, String url, String user) {
        return rest.get().uri(url).header("X-User", user).retrieve().body(String.class);
    }

    private static String viaWeb(WebClient web, String url, String user) {
        return web.get().uri(url).header("x-user", user).retrieve().bodyToMono(String.class).block();
    }

    @Test
    void aKeyAlwaysReachesTheSameInstanceThroughWebClientAndRestClient() throws Exception {
        List<Backend> list = backends("sticky", 4);
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.sticky.polylb.config=loadbalance=consistenthash",
                "spring.cloud.loadbalancer.clients.sticky.polylb.hash-key=header:X-User");
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        WebClient web = context.getBean(WebClient.Builder.class).build();
        Map<String, String> home = new HashMap<>();
        // 100 keys, each sent 6 times, alternating clients (and the header's spelling: names are case-insensitive)
        for (int round = 0; round < 6; round++) {
            for (int k = 0; k < 100; k++) {
                String user = "user-" + k;
                String answer = round % 2 == 0 ? viaRest(rest, "http://sticky/", user) : viaWeb(web, "http://sticky/", user);
                String first = home.putIfAbsent(user, answer);
                assertTrue(first == null || first.equals(answer), user + " went to " + first + " then to " + answer);
            }
        }
        // and the keys do not all share one instance
        assertTrue(home.values().stream().distinct().count() >= 3, home.toString());
        assertEquals(600, list.stream().mapToInt(b -> b.hits.get()).sum());
        assertEquals(0, Stats.active(TestApp.client(context, "sticky").statsJson()));
    }

    @Test
    void distinctKeysSplitByWeight() throws Exception {
        Backend a = backend("a", 200, 0);
        Backend b = backend("b", 200, 0);
        Backend c = backend("c", 200, 0);
        TestApp.DISCOVERY.put("spread", List.of(a.instance("spread", Map.of("weight", "100")),
                b.instance("spread", Map.of("weight", "200")), c.instance("spread", Map.of("weight", "300"))));
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.spread.polylb.config=loadbalance=rendezvous",
                "spring.cloud.loadbalancer.polylb.hash-key=header:X-User");
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        int n = 900;
        for (int k = 0; k < n; k++) {
            viaRest(rest, "http://spread/", "user-" + k);
        }
        // rendezvous splits keys exactly by weight: each count is binomial(n, w / 600) over
        // well-hashed keys; 4.5 sigma.
        assertBinomial(n, new Backend[] {a, b, c}, new double[] {1 / 6.0, 2 / 6.0, 3 / 6.0});
    }

    @Test
    void removingAnInstanceMovesOnlyItsKeys() throws Exception {
        List<Backend> list = backends("ring", 5);
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.ring.polylb.config=loadbalance=consistenthash",
                "spring.cloud.loadbalancer.clients.ring.polylb.hash-key=query:user");
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        Map<String, String> before = new HashMap<>();
        for (int k = 0; k < 300; k++) {
            before.put("u" + k, rest.get().uri("http://ring/?a=1&user=u" + k).retrieve().body(String.class));
        }
        Backend gone = list.get(2);
        TestApp.DISCOVERY.put("ring", list.stream().filter(x -> x != gone).map(x -> x.instance("ring")).toList());
        int moved = 0;
        int onGone = 0;
        for (int k = 0; k < 300; k++) {
            String user = "u" + k;
            String after = rest.get().uri("http://ring/?user=" + user).retrieve().body(String.class);
            if (before.get(user).equals(gone.name)) {
                onGone++;
                assertNotEquals(gone.name, after);
            } else {
                if (!after.equals(before.get(user))) {
                    moved++;
                }
            }
        }
        System.out.printf("ring: %d of 300 keys were on the removed instance; %d others moved%n", onGone, moved);
        assertTrue(onGone > 0, "no key was on the removed instance");
        assertEquals(0, moved, "keys of the instances that stayed moved");
    }

    @Test
    void requestsWithoutTheKeySpreadAsRandomWould() throws Exception {
        List<Backend> list = backends("keyless", 4);
        ConfigurableApplicationContext context = start(
                "spring.cloud.loadbalancer.clients.keyless.polylb.config=loadbalance=rendezvous",
                "spring.cloud.loadbalancer.clients.keyless.polylb.hash-key=cookie:session");
        WebClient web = context.getBean(WebClient.Builder.class).build();
        int n = 600;
        for (int i = 0; i < n; i++) {
            web.get().uri("http://keyless/").retrieve().bodyToMono(String.class).block(); // no cookie
        }
        // Each keyless request hashes a fresh random key (not seeded: ThreadLocalRandom), so each
        // count is binomial(n, 1/4): 5 sigma leaves a correct implementation a 1e-6 chance to fail.
        double[] quarter = {0.25, 0.25, 0.25, 0.25};
        assertBinomial(n, list.toArray(Backend[]::new), quarter, 5.0);
        // LoadBalancerClient.choose(serviceId) carries no request data at all: it spreads too.
        LoadBalancerClient lb = context.getBean(LoadBalancerClient.class);
        Map<String, Integer> chosen = new HashMap<>();
        for (int i = 0; i < 400; i++) {
            chosen.merge(lb.choose("keyless").getInstanceId(), 1, Integer::sum);
        }
        assertEquals(4, chosen.size(), chosen.toString());
        chosen.values().forEach(count -> assertTrue(Math.abs(count - 100) <= 5 * Math.sqrt(400 * 0.25 * 0.75), chosen.toString()));
        // while a cookie (WebClient's own, or a Cookie header among others) is a key
        String first = web.get().uri("http://keyless/").cookie("session", "s-42").retrieve().bodyToMono(String.class).block();
        for (int i = 0; i < 20; i++) {
            assertEquals(first, web.get().uri("http://keyless/").header("Cookie", "theme=dark; session=s-42")
                    .retrieve().bodyToMono(String.class).block());
        }
    }

    @Test
    void badHashKeySettingsFailTheStartup() {
        String message = startupError("spring.cloud.loadbalancer.clients.h.polylb.config=loadbalance=maglev",
                "spring.cloud.loadbalancer.clients.h.polylb.hash-key=header");
        assertTrue(message.contains("spring.cloud.loadbalancer.clients.h.polylb.hash-key") && message.contains("'header'"),
                message);
        message = startupError("spring.cloud.loadbalancer.polylb.config=loadbalance=consistenthash",
                "spring.cloud.loadbalancer.polylb.hash-key=body:user");
        assertTrue(message.contains("spring.cloud.loadbalancer.polylb.hash-key: 'body:user'"), message);
        // a hashing strategy with no key: every request would hash alike
        message = startupError("spring.cloud.loadbalancer.clients.h.polylb.config=loadbalance=boundedhash");
        assertTrue(message.contains("'h'") && message.contains("boundedhash")
                && message.contains("spring.cloud.loadbalancer.clients.h.polylb.hash-key"), message);
        // a key for a client that hashes nothing would do nothing
        message = startupError("spring.cloud.loadbalancer.clients.h.polylb.hash-key=header:X-User");
        assertTrue(message.contains("spring.cloud.loadbalancer.clients.h.polylb.hash-key") && message.contains("p2c"),
                message);
        // a shared key serves the clients that hash and is ignored by the others
        start("spring.cloud.loadbalancer.polylb.hash-key=header:X-User",
                "spring.cloud.loadbalancer.clients.h.polylb.config=loadbalance=maglev",
                "spring.cloud.loadbalancer.clients.other.polylb.config=loadbalance=leastactive");
    }

    private String startupError(String... properties) {
        RuntimeException e = assertThrows(RuntimeException.class, () -> start(properties));
        StringBuilder all = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            all.append(t.getMessage()).append(" | ");
        }
        return all.toString();
    }

    static void assertBinomial(int n, Backend[] backends, double[] share) {
        assertBinomial(n, backends, share, 4.5);
    }

    static void assertBinomial(int n, Backend[] backends, double[] share, double sigmas) {
        for (int i = 0; i < backends.length; i++) {
            double mean = n * share[i];
            double bound = sigmas * Math.sqrt(n * share[i] * (1 - share[i]));
            int hits = backends[i].hits.get();
            System.out.printf("%s: %d hits, expected %.0f ± %.1f%n", backends[i].name, hits, mean, bound);
            assertTrue(Math.abs(hits - mean) <= bound, backends[i].name + ": " + hits + " hits, expected " + mean + " ± " + bound);
        }
    }
}
