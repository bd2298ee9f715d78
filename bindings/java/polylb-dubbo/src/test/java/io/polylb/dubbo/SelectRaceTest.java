package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static io.polylb.dubbo.TestInvokers.invoker;
import static io.polylb.dubbo.TestInvokers.weighted;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.dubbo.rpc.Invoker;
import org.junit.jupiter.api.Test;

/** A select never fails because other threads keep changing the provider set meanwhile. */
class SelectRaceTest extends AdapterTest {
    @Test
    void aSelectThatKeepsLosingRacesStillPicks() throws Exception {
        PolylbLoadBalance lb = track(new PolylbLoadBalance.RoundRobin());
        List<Invoker<Object>> base = weighted(1, 1, 1);
        pick(lb, base, call("m"));
        AtomicInteger next = new AtomicInteger(10);
        ExecutorService registry = Executors.newSingleThreadExecutor();
        try {
            // Each walk of this call's list first lets another thread's call register a provider
            // the registry just added: the set changes between every two steps of the select,
            // as under heavy churn on a starved thread.
            List<Invoker<Object>> racing = new ArrayList<>(base) {
                @Override
                public Iterator<Invoker<Object>> iterator() {
                    Future<?> refresh = registry.submit(() -> {
                        List<Invoker<Object>> refreshed = new ArrayList<>(base);
                        refreshed.add(invoker(next.incrementAndGet(), "weight=1"));
                        pick(lb, refreshed, call("m"));
                    });
                    try {
                        refresh.get(300, TimeUnit.MILLISECONDS);
                    } catch (TimeoutException e) {
                        // The other call waits for this one: fine.
                    } catch (Exception e) {
                        throw new AssertionError(e);
                    }
                    return super.iterator();
                }
            };
            Invoker<Object> chosen = pick(lb, racing, call("m"));
            assertTrue(base.contains(chosen), String.valueOf(chosen));
        } finally {
            registry.shutdown();
            assertTrue(registry.awaitTermination(10, TimeUnit.SECONDS));
        }
    }
}
