package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.Test;

/**
 * A service's state (its native balancers) is freed once its reference is destroyed (every
 * invoker of its directory destroyed) and it went a sweep period without a select; calls still
 * in flight then end safely.
 */
class StateSweepTest {
    private final List<CompletableFuture<AppResponse>> open = new ArrayList<>();

    /** A provider of {@code service} whose calls stay open until their response is completed. */
    private TestInvokers.FakeInvoker provider(String service, int n) {
        URL url = URL.valueOf("dubbo://10.0.0." + n + ":20880/" + service + "?loadbalance=polylb-leastactive");
        return new TestInvokers.FakeInvoker(url) {
            @Override
            public Result invoke(Invocation invocation) {
                CompletableFuture<AppResponse> response = new CompletableFuture<>();
                open.add(response);
                return new AsyncRpcResult(response, invocation);
            }
        };
    }

    private static RpcInvocation callOf(String service) {
        return new RpcInvocation("sayHello", service, service, new Class<?>[0], new Object[0]);
    }

    @Test
    void aDestroyedReferencesStateIsFreedAndItsCallInFlightEndsSafely() throws Exception {
        PolylbLoadBalance lb = new PolylbLoadBalance.LeastActive();
        try {
            List<Invoker<Object>> gone = List.of(provider("com.example.Gone", 1), provider("com.example.Gone", 2));
            List<Invoker<Object>> kept = List.of(provider("com.example.Kept", 1), provider("com.example.Kept", 2));
            lb.select(kept, kept.get(0).getUrl(), callOf("com.example.Kept"));

            // A call of the doomed service is sent and stays open.
            RpcInvocation inv = callOf("com.example.Gone");
            PolylbClusterFilter.beginInvocation(inv);
            Invoker<Object> chosen = lb.select(gone, gone.get(0).getUrl(), inv);
            Result result = new PolylbInvokerFilter().invoke(chosen, inv);
            PolylbClusterFilter.releaseUnsent(inv);
            ServiceState state = lb.serviceState("com.example.Gone");
            assertNotNull(state);
            assertEquals(1, OuterFilterFailureTest.activeIn(state.statsJson()));
            assertEquals(2, lb.serviceCount());

            // The reference is destroyed: its directory destroys every invoker.
            gone.forEach(Invoker::destroy);
            assertEquals(0, lb.sweep(), "used since the last sweep: kept for one more period");
            assertEquals(1, lb.sweep(), "unused for a period, every invoker destroyed: freed");
            assertNull(lb.serviceState("com.example.Gone"));
            assertTrue(state.retired);
            assertEquals(1, lb.serviceCount(), "the live service's state stays");
            assertEquals(0, lb.sweep(), "the live service is never freed, used or not");
            assertNotNull(lb.serviceState("com.example.Kept"));

            // The call in flight answers after the free: it reports into the closed balancer,
            // which neither crashes (the suite runs with -Xcheck:jni) nor fails the call.
            for (CompletableFuture<AppResponse> response : open) {
                response.complete(new AppResponse("ok"));
            }
            assertEquals("ok", result.get(5, TimeUnit.SECONDS).getValue());

            // A new reference to the same service starts a fresh state.
            List<Invoker<Object>> again = List.of(provider("com.example.Gone", 1), provider("com.example.Gone", 3));
            RpcInvocation next = callOf("com.example.Gone");
            PolylbClusterFilter.beginInvocation(next);
            assertNotNull(lb.select(again, again.get(0).getUrl(), next));
            PolylbClusterFilter.releaseUnsent(next);
            assertEquals(2, lb.serviceCount());
            assertEquals(0, OuterFilterFailureTest.activeIn(lb.serviceState("com.example.Gone").statsJson()));
        } finally {
            lb.destroy();
        }
    }

    /**
     * A service in use whose providers come and go (each restart a new address, as a pod's) keeps
     * ids for its set and for the providers that left within the retention time, not for every
     * provider it ever had; one that comes back within that time gets its id back.
     */
    @Test
    void providersThatComeAndGoLeaveNoIdsBehind() {
        PolylbLoadBalance lb = new PolylbLoadBalance.RoundRobin();
        try {
            String service = "com.example.Churned";
            long[] now = {0};
            List<Invoker<Object>> set = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                set.add(churned(service, i));
            }
            lb.select(set, set.get(0).getUrl(), callOf(service));
            ServiceState state = lb.serviceState(service);
            state.clock = () -> now[0];
            long step = TimeUnit.SECONDS.toNanos(1);
            // One provider replaced a second, for 5,000 s (the retention time is 600 s).
            for (int i = 10; i < 5_010; i++) {
                set.remove(0).destroy();
                set.add(churned(service, i));
                now[0] += step;
                lb.select(set, set.get(0).getUrl(), callOf(service));
            }
            long retained = ServiceState.DEPARTED_ID_RETENTION_NANOS / step;
            int kept = state.knownIdentities();
            assertTrue(kept <= 10 + retained + 1,
                    kept + " identities kept for a set of 10 after 5,000 came and went (at most "
                            + (10 + retained + 1) + ": the set and those gone within the retention time)");
            assertTrue(kept >= 10 + retained - 1, "those that left recently are kept: " + kept);

            // The provider that left a second ago comes back with its id.
            Invoker<Object> back = churned(service, 5_009 - 10);
            long id = state.idOf(back.getUrl());
            assertTrue(id > 0);
            set.add(back);
            now[0] += step;
            lb.select(set, set.get(0).getUrl(), callOf(service));
            assertEquals(id, state.idOf(back.getUrl()));
        } finally {
            lb.destroy();
        }
    }

    /**
     * A service in use whose providers' URLs change a parameter that makes the balancer (here
     * hash.nodes) keeps one balancer per value it ever read, each with a stale set and ring:
     * sweeps close those no method has used for a period, and keep two values that alternate
     * (the first provider during a rolling change). Calls go on through the current one.
     */
    @Test
    void balancersOfConfigurationsNoLongerReadAreClosed() {
        PolylbLoadBalance lb = new PolylbLoadBalance.ConsistentHash();
        try {
            String service = "com.example.Reconfigured";
            for (int nodes = 160; nodes < 240; nodes += 4) {
                assertNotNull(pick(lb, hashNodes(service, nodes), service));
            }
            ServiceState state = lb.serviceState(service);
            assertEquals(20, state.statsJson().size(), "one balancer per hash.nodes value read");
            assertEquals(0, lb.sweep());
            assertEquals(20, state.statsJson().size(), "bound within the period: kept for one more");
            assertEquals(0, lb.sweep());
            assertEquals(1, state.statsJson().size(), "only the configuration in use keeps a balancer");
            assertNotNull(pick(lb, hashNodes(service, 236), service));

            // Two values in turn, between sweeps: both kept; the one before them goes.
            for (int k = 0; k < 4; k++) {
                assertNotNull(pick(lb, hashNodes(service, 400), service));
                assertNotNull(pick(lb, hashNodes(service, 404), service));
                lb.sweep();
            }
            assertEquals(2, state.statsJson().size());
            assertEquals(1, lb.serviceCount());
        } finally {
            lb.destroy();
        }
    }

    private static Invoker<Object> pick(PolylbLoadBalance lb, List<Invoker<Object>> set, String service) {
        return lb.select(set, set.get(0).getUrl(), keyed(service));
    }

    private static List<Invoker<Object>> hashNodes(String service, int nodes) {
        List<Invoker<Object>> set = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            set.add(new TestInvokers.FakeInvoker(URL.valueOf("dubbo://10.2.0." + i + ":20880/" + service
                    + "?hash.nodes=" + nodes)));
        }
        return set;
    }

    private static RpcInvocation keyed(String service) {
        return new RpcInvocation("sayHello", service, service, new Class<?>[0], new Object[] {"key"});
    }

    /** Provider {@code n} of {@code service}, at an address of its own. */
    private static Invoker<Object> churned(String service, int n) {
        return new TestInvokers.FakeInvoker(URL.valueOf("dubbo://10.1." + (n / 250) + "." + (n % 250)
                + ":20880/" + service + "?loadbalance=polylb-roundrobin"));
    }

    @Test
    void aLiveAliasKeepsTheState() {
        // Two references to one service: the set's members may be the destroyed reference's
        // objects, the live reference's objects their aliases.
        PolylbLoadBalance lb = new PolylbLoadBalance.LeastActive();
        try {
            List<Invoker<Object>> first = List.of(provider("com.example.Two", 1), provider("com.example.Two", 2));
            List<Invoker<Object>> second = List.of(provider("com.example.Two", 1), provider("com.example.Two", 2));
            lb.select(first, first.get(0).getUrl(), callOf("com.example.Two"));
            lb.select(second, second.get(0).getUrl(), callOf("com.example.Two"));
            first.forEach(Invoker::destroy);
            lb.sweep();
            assertEquals(0, lb.sweep());
            assertEquals(1, lb.serviceCount());
            second.forEach(Invoker::destroy);
            assertEquals(1, lb.sweep());
            assertEquals(0, lb.serviceCount());
        } finally {
            lb.destroy();
        }
    }

    @Test
    void selectsRacingSweepsNeverFail() throws Exception {
        // Destroyed invokers can still be handed to the balancer (a late call's list): sweeps
        // back to back then retire states that selects have just looked up.
        PolylbLoadBalance lb = new PolylbLoadBalance.LeastActive();
        List<Invoker<Object>> list = List.of(provider("com.example.Race", 1), provider("com.example.Race", 2));
        list.forEach(Invoker::destroy);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 2; t++) {
            Thread thread = new Thread(() -> {
                while (!stop.get()) {
                    try {
                        RpcInvocation inv = callOf("com.example.Race");
                        PolylbClusterFilter.beginInvocation(inv);
                        Invoker<Object> chosen = lb.select(list, list.get(0).getUrl(), inv);
                        if (chosen != list.get(0) && chosen != list.get(1)) {
                            throw new AssertionError("picked " + chosen);
                        }
                        PolylbClusterFilter.releaseUnsent(inv);
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                        return;
                    }
                }
            });
            threads.add(thread);
            thread.start();
        }
        int freed = 0;
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1000);
        while (System.nanoTime() < end && failure.get() == null) {
            freed += lb.sweep();
        }
        stop.set(true);
        for (Thread thread : threads) {
            thread.join();
        }
        lb.destroy();
        if (failure.get() != null) {
            throw new AssertionError("a select failed while sweeps ran", failure.get());
        }
        assertTrue(freed > 0, "no state was freed under way: the race was not exercised");
    }

    @Test
    void sweepsRunOnDubbosSchedulerWithTheConfiguredPeriod() throws Exception {
        String before = System.getProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY);
        System.setProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY, "50");
        FrameworkModel framework = new FrameworkModel();
        try {
            ApplicationModel app = framework.newApplication();
            PolylbLoadBalance lb = (PolylbLoadBalance) app.getExtensionLoader(LoadBalance.class)
                    .getExtension("polylb-leastactive");
            List<Invoker<Object>> list = List.of(provider("com.example.Timed", 1), provider("com.example.Timed", 2));
            lb.select(list, list.get(0).getUrl(), call("sayHello"));
            assertEquals(1, lb.serviceCount());
            list.forEach(Invoker::destroy);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (lb.serviceCount() > 0 && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertEquals(0, lb.serviceCount(), "no scheduled sweep freed the state");
        } finally {
            framework.destroy();
            if (before == null) {
                System.clearProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY);
            } else {
                System.setProperty(PolylbLoadBalance.SWEEP_PERIOD_KEY, before);
            }
        }
    }
}
