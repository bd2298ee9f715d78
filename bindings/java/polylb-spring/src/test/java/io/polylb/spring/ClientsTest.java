package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import feign.FeignException;
import java.net.ConnectException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.http.HttpEntity;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpMethod;
import org.springframework.web.client.RestClient;
import org.springframework.web.client.RestClientResponseException;
import org.springframework.web.client.RestTemplate;

/**
 * RestTemplate (Spring's LoadBalancerInterceptor and BlockingLoadBalancerClient) and OpenFeign
 * (FeignBlockingLoadBalancerClient, which makes its own Request and calls the lifecycle itself)
 * go through polylb as WebClient and RestClient do.
 */
class ClientsTest extends LocalServers {
    private static final String URL = "http://" + ClientsApp.SERVICE + "/";

    private ConfigurableApplicationContext startClients(String... properties) {
        return closeLater(ClientsApp.start(properties));
    }

    @Test
    void restTemplateAndFeignHonourTheWeights() throws Exception {
        Backend a = backend("a", 200, 0);
        Backend b = backend("b", 200, 0);
        Backend c = backend("c", 200, 0);
        Backend[] all = {a, b, c};
        TestApp.DISCOVERY.put(ClientsApp.SERVICE, List.of(a.instance("orders", Map.of("weight", "100")),
                b.instance("orders", Map.of("weight", "200")), c.instance("orders", Map.of("weight", "300"))));
        ConfigurableApplicationContext context = startClients(
                "spring.cloud.loadbalancer.clients.orders.polylb.config=loadbalance=p2c&seed=42");
        RestTemplate template = context.getBean(RestTemplate.class);
        ClientsApp.Orders feign = context.getBean(ClientsApp.Orders.class);
        double[] share = {1 / 6.0, 2 / 6.0, 3 / 6.0};
        int n = 600;
        for (int i = 0; i < n; i++) {
            template.getForObject(URL, String.class);
        }
        // one at a time: p2c draws by weight alone, each count binomial(n, w / 600); 4.5 sigma
        HashingTest.assertBinomial(n, all, share);
        for (Backend x : all) {
            x.hits.set(0);
        }
        for (int i = 0; i < n; i++) {
            feign.get();
        }
        HashingTest.assertBinomial(n, all, share);
        PolylbClient client = TestApp.client(context, ClientsApp.SERVICE);
        assertEquals(0, Stats.active(client.statsJson()), client.statsJson());
        // every request of both clients was reported to the instance that served it
        assertEquals(2 * n, Stats.number(client.statsJson(), a.address(), "succeeded")
                + Stats.number(client.statsJson(), b.address(), "succeeded")
                + Stats.number(client.statsJson(), c.address(), "succeeded"), client.statsJson());
    }

    @Test
    void everyRequestIsReportedWithItsOutcome() throws Exception {
        Backend ok = backend("ok", 200, 2);
        Backend missing = backend("missing", 404, 2);
        Backend unavailable = backend("unavailable", 503, 2);
        Backend gateway = backend("gateway", 504, 2);
        Backend dead = backend("dead", 200, 0);
        int deadPort = dead.port();
        dead.close();
        TestApp.DISCOVERY.put(ClientsApp.SERVICE, List.of(ok.instance("orders"), missing.instance("orders"),
                unavailable.instance("orders"), gateway.instance("orders"),
                new DefaultServiceInstance("dead", "orders", "127.0.0.1", deadPort, false)));
        ConfigurableApplicationContext context = startClients(
                "spring.cloud.loadbalancer.clients.orders.polylb.config=loadbalance=random&seed=7");
        RestTemplate template = context.getBean(RestTemplate.class);
        ClientsApp.Orders feign = context.getBean(ClientsApp.Orders.class);
        AtomicInteger answered = new AtomicInteger();
        AtomicInteger refused = new AtomicInteger();
        ExecutorService callers = Executors.newFixedThreadPool(8);
        List<Future<?>> done = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            boolean useFeign = t % 2 == 1;
            done.add(callers.submit(() -> {
                for (int i = 0; i < 40; i++) {
                    try {
                        if (useFeign) {
                            feign.get();
                        } else {
                            template.getForObject(URL, String.class);
                        }
                        answered.incrementAndGet();
                    } catch (RestClientResponseException | FeignException.FeignClientException
                            | FeignException.FeignServerException status) {
                        answered.incrementAndGet(); // 404, 503, 504: an answer
                    } catch (RuntimeException e) {
                        if (!causedBy(e, ConnectException.class)) {
                            throw e;
                        }
                        refused.incrementAndGet();
                    }
                }
                return null;
            }));
        }
        for (Future<?> f : done) {
            f.get(120, TimeUnit.SECONDS);
        }
        callers.shutdown();
        PolylbClient client = TestApp.client(context, ClientsApp.SERVICE);
        String stats = client.statsJson();
        System.out.printf("ok %d, 404 %d, 503 %d, 504 %d, refused %d%n", ok.hits.get(), missing.hits.get(),
                unavailable.hits.get(), gateway.hits.get(), refused.get());
        assertEquals(320, answered.get() + refused.get());
        assertEquals(answered.get(), ok.hits.get() + missing.hits.get() + unavailable.hits.get() + gateway.hits.get());
        assertEquals(0, client.requestsInFlight(), stats);
        assertEquals(0, Stats.active(stats), stats);
        for (Backend x : List.of(ok, missing, unavailable, gateway)) {
            assertTrue(x.hits.get() > 0, x.name + " got no request: " + stats);
        }
        assertTrue(refused.get() > 0, stats);
        // 404: the service's answer, a success; 503 a failure; 504 a timeout; a refused connection a failure
        assertEquals(ok.hits.get(), Stats.number(stats, ok.address(), "succeeded"), stats);
        assertEquals(missing.hits.get(), Stats.number(stats, missing.address(), "succeeded"), stats);
        assertEquals(0, Stats.number(stats, missing.address(), "failures"), stats);
        assertEquals(unavailable.hits.get(), Stats.number(stats, unavailable.address(), "failures"), stats);
        assertEquals(0, Stats.number(stats, unavailable.address(), "timeouts"), stats);
        // polylb's "failures" counts the timeouts among them
        assertEquals(gateway.hits.get(), Stats.number(stats, gateway.address(), "timeouts"), stats);
        assertEquals(gateway.hits.get(), Stats.number(stats, gateway.address(), "failures"), stats);
        String deadAddress = "127.0.0.1:" + deadPort;
        assertEquals(refused.get(), Stats.number(stats, deadAddress, "failures"), stats);
        assertEquals(0, Stats.number(stats, deadAddress, "timeouts"), stats);
    }

    @Test
    void aHeaderKeyRoutesEveryClientAlike() throws Exception {
        List<Backend> list = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            list.add(backend("i" + i, 200, 0));
        }
        TestApp.DISCOVERY.put(ClientsApp.SERVICE, list.stream().map(x -> x.instance("orders")).toList());
        ConfigurableApplicationContext context = startClients(
                "spring.cloud.loadbalancer.clients.orders.polylb.config=loadbalance=maglev",
                "spring.cloud.loadbalancer.clients.orders.polylb.hash-key=header:X-User");
        RestTemplate template = context.getBean(RestTemplate.class);
        ClientsApp.Orders feign = context.getBean(ClientsApp.Orders.class);
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        Set<String> used = new HashSet<>();
        for (int k = 0; k < 80; k++) {
            String user = "user-" + k;
            HttpHeaders headers = new HttpHeaders();
            headers.set("x-user", user);
            String byTemplate = template.exchange(URL, HttpMethod.GET, new HttpEntity<>(headers), String.class).getBody();
            String byFeign = feign.get(user);
            String byRest = rest.get().uri(URL).header("X-USER", user).retrieve().body(String.class);
            assertEquals(byTemplate, byFeign, user);
            assertEquals(byTemplate, byRest, user);
            used.add(byTemplate);
        }
        assertEquals(4, used.size(), "80 keys over 4 instances: " + used);
    }

    private static boolean causedBy(Throwable e, Class<? extends Throwable> type) {
        Set<Throwable> seen = new HashSet<>();
        for (Throwable t = e; t != null && seen.add(t); t = t.getCause()) {
            if (type.isInstance(t)) {
                return true;
            }
        }
        return false;
    }
}
