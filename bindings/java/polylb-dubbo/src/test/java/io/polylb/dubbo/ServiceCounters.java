package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.polylb.Outcome;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.cluster.LoadBalance;

/**
 * polylb's per-invoker counters for one service, summed over its invokers, as a consumer's own
 * LoadBalance extension reports them ({@link PolylbLoadBalance#statsJson}); {@code failures}
 * includes timeouts.
 */
final class ServiceCounters {
    int active;
    int selected;
    int succeeded;
    int failures;
    int timeouts;
    /** The latencies of the successes, summed (each invoker's mean times its successes). */
    long successUs;

    /** The counters of {@code service} in {@code bootstrap}'s LoadBalance extension {@code loadbalance}. */
    static ServiceCounters read(DubboBootstrap bootstrap, String loadbalance, String service) {
        PolylbLoadBalance lb = (PolylbLoadBalance) bootstrap.getApplicationModel()
                .getExtensionLoader(LoadBalance.class).getExtension(loadbalance);
        ServiceCounters c = new ServiceCounters();
        for (String json : lb.statsJson(service)) {
            for (JsonElement e : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                JsonObject m = e.getAsJsonObject();
                c.active += m.get("active").getAsInt();
                c.selected += m.get("selected").getAsInt();
                c.succeeded += m.get("succeeded").getAsInt();
                c.failures += m.get("failures").getAsInt();
                c.timeouts += m.get("timeouts").getAsInt();
                c.successUs += m.get("mean_success_us").getAsLong() * m.get("succeeded").getAsInt();
            }
        }
        return c;
    }

    /**
     * Waits (up to 20 s) until polylb counts no call of the service in flight; returns the
     * counters then.
     */
    static ServiceCounters awaitNoneInFlight(DubboBootstrap bootstrap, String loadbalance, String service)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        ServiceCounters c = read(bootstrap, loadbalance, service);
        while (c.active != 0 && System.nanoTime() < deadline) {
            Thread.sleep(20);
            c = read(bootstrap, loadbalance, service);
        }
        assertEquals(0, c.active, "calls still counted in flight: " + c);
        return c;
    }

    /** Picks ended with neither a success nor a failure: reported CANCELLED. */
    int cancelled() {
        return selected - active - succeeded - failures;
    }

    /** The outcome of the one call ended since {@code before} (null if not exactly one). */
    Outcome outcomeSince(ServiceCounters before) {
        List<Integer> delta = List.of(succeeded - before.succeeded, failures - before.failures,
                timeouts - before.timeouts, cancelled() - before.cancelled());
        return Map.of(List.of(1, 0, 0, 0), Outcome.SUCCESS, List.of(0, 1, 0, 0), Outcome.FAILURE,
                List.of(0, 1, 1, 0), Outcome.TIMEOUT, List.of(0, 0, 0, 1), Outcome.CANCELLED).get(delta);
    }

    @Override
    public String toString() {
        return "active=" + active + " selected=" + selected + " succeeded=" + succeeded + " failures="
                + failures + " timeouts=" + timeouts + " cancelled=" + cancelled();
    }
}
