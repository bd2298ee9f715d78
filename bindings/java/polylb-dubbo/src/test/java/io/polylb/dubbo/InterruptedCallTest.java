package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A consumer interrupts its own sync call (as {@code Future.cancel(true)} on the task making it
 * does) while the providers are fine: Dubbo throws an RpcException around the
 * InterruptedException, and the failover retries on the others, each attempt failing at once.
 * No verdict on the providers, which all answer: no failure is booked (one was on each provider
 * tried), and nothing stays in flight.
 */
class InterruptedCallTest {
    static final Set<String> ANSWERED = ConcurrentHashMap.newKeySet();

    @RegisterExtension
    static final InJvmProviders<LaterService> PROVIDERS = new InJvmProviders<>(LaterService.class,
            "interrupt-provider-", new String[] {"A", "B", "C"}, name -> new SleepingLater(name, ANSWERED));

    @Test
    void aConsumersInterruptIsNoVerdictOnTheProviders() throws Exception {
        // failover with 2 retries and a 10 s timeout: nothing times out.
        try (DirectConsumer<LaterService> c = new DirectConsumer<>("interrupt-consumer", LaterService.class,
                PROVIDERS.directUrls(), "polylb-leastactive", 2, 10_000, false)) {
            LaterService later = c.reference.get();
            for (int i = 0; i < 3; i++) {
                later.later("warm-" + i, 0);
            }
            ServiceCounters before = c.awaitNoneInFlight();
            Thread caller = new Thread(() -> {
                try {
                    later.later("interrupted", 1500);
                } catch (RuntimeException expected) {
                    // the interrupt ends the call
                }
            });
            caller.start();
            Thread.sleep(300);
            caller.interrupt();
            caller.join();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!ANSWERED.contains("interrupted") && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(ANSWERED.contains("interrupted"), "the provider answered");
            ServiceCounters after = c.awaitNoneInFlight();
            assertEquals(before.failures, after.failures, "failures booked for the interrupt: " + after);
            assertEquals(before.timeouts, after.timeouts, "timeouts booked for the interrupt: " + after);
            assertEquals(before.succeeded, after.succeeded, "the abandoned call's answer is no success: " + after);
            assertTrue(after.selected > before.selected, "the call was picked");
        }
    }
}
