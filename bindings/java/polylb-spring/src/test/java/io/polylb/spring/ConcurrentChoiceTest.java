package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.loadbalancer.Response;

/** Choices racing instance-list updates always find an instance when every list has one. */
class ConcurrentChoiceTest {
    @Test
    void aChoiceRacingAnUpdateNeverComesBackEmpty() throws Exception {
        try (PolylbClient client = new PolylbClient("race", new PolylbSettings("loadbalance=random", "test",
                Duration.ofSeconds(60), HttpOutcomes.DEFAULT_FAILURE_STATUSES, HttpOutcomes.DEFAULT_TIMEOUT_STATUSES, null))) {
            PolylbLoadBalancer lb = new PolylbLoadBalancer(null, client);
            ServiceInstance a = new DefaultServiceInstance("a", "race", "10.0.0.1", 80, false);
            ServiceInstance b = new DefaultServiceInstance("b", "race", "10.0.0.2", 80, false);
            AtomicInteger empty = new AtomicInteger();
            Thread[] threads = new Thread[4];
            for (int t = 0; t < threads.length; t++) {
                ServiceInstance only = t % 2 == 0 ? a : b;
                threads[t] = new Thread(() -> {
                    for (int i = 0; i < 500_000; i++) {
                        // another list object each time, as an uncached discovery gives
                        Response<ServiceInstance> r = lb.choose(List.of(only));
                        if (!r.hasServer()) {
                            empty.incrementAndGet();
                        }
                    }
                });
                threads[t].start();
            }
            for (Thread thread : threads) {
                thread.join();
            }
            assertEquals(0, empty.get(), "choices that found no instance although the list had one");
        }
    }
}
