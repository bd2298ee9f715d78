package io.polylb.bench;

import io.polylb.dubbo.AdapterCalls;
import io.polylb.dubbo.PolylbClusterFilter;
import io.polylb.dubbo.PolylbInvokerFilter;
import io.polylb.dubbo.PolylbLoadBalance;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.cluster.router.state.BitList;
import org.apache.dubbo.rpc.cluster.loadbalance.AdaptiveLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.ConsistentHashLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.LeastActiveLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.RandomLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.RoundRobinLoadBalance;
import org.apache.dubbo.rpc.cluster.loadbalance.ShortestResponseLoadBalance;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * (b) LoadBalance.select(invokers, url, invocation): Dubbo's own balancers against polylb's
 * adapter, same invokers, same invocations, same JVM. Each (impl, strategy, n) runs in its own
 * fork so the call site stays monomorphic, as in an application using one balancer.
 *
 * <p>Provider URLs are realistic: 20 parameters, distinct {@code weight} = 100 + 7i and a
 * {@code timestamp} an hour or more in the past (no warm-up). Invocations cycle through 1000
 * pre-built calls whose argument is a distinct random 16-character string; each benchmark thread
 * has its own (an invocation belongs to one call at a time, and the adapter records its pick on
 * it), so threads share only the balancer, as concurrent RPCs do.
 *
 * <p>The polylb side also makes each call as Dubbo's cluster layer and filters do: {@link
 * PolylbClusterFilter#beginInvocation}, then the pick's answer handed to {@link
 * PolylbInvokerFilter} as an answer at once would be (AdapterCalls: the filter reports it, a
 * success with its latency: one more JNI call, and the latency windows {@code shortestresponse}
 * reads fill as in use), then {@link PolylbClusterFilter#releaseUnsent}. The call itself (Dubbo's
 * result objects) is neither side's. So polylb's side pays for select + report while Dubbo's pays
 * for select only (without the RpcStatus counting its leastactive and shortestresponse need).
 * The answers carry no {@code lb_adaptive} metrics, so {@code adaptive} weighs two loads of 0 on
 * both sides (a weighted coin), after Dubbo's per-pick bookkeeping (its service keys, the pick
 * time, the request count, the invocation's attachment) and polylb's.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
@State(Scope.Benchmark)
public class DubboSelectBench {
    @Param({"random", "roundrobin", "leastactive", "shortestresponse", "consistenthash", "adaptive"})
    public String strategy;

    @Param({"dubbo", "polylb"})
    public String impl;

    @Param({"10", "100"})
    public int n;

    /**
     * {@code arraylist}: the same list object every call (as Dubbo's own benchmarks and a static
     * list). {@code bitlist}: a fresh clone of a BitList per call, which is what Dubbo 3's router
     * chain hands a LoadBalance in production; the clone is paid by both sides.
     */
    @Param({"arraylist"})
    public String list;

    private LoadBalance lb;
    private final PolylbInvokerFilter invokerFilter = new PolylbInvokerFilter();
    /** The provider's answer, the same object for every call (nothing here keeps it). */
    private final AppResponse answer = new AppResponse("ok");
    private List<Invoker<Object>> invokers;
    private URL consumerUrl;
    private boolean polylb;
    private BitList<Invoker<Object>> directory;

    static final class ProviderInvoker implements Invoker<Object> {
        private final URL url;

        ProviderInvoker(URL url) {
            this.url = url;
        }

        @Override
        public Class<Object> getInterface() {
            return Object.class;
        }

        @Override
        public Result invoke(Invocation invocation) throws RpcException {
            throw new UnsupportedOperationException();
        }

        @Override
        public URL getUrl() {
            return url;
        }

        @Override
        public boolean isAvailable() {
            return true;
        }

        @Override
        public void destroy() {}
    }

    @Setup(Level.Trial)
    public void setUp() {
        long now = System.currentTimeMillis();
        invokers = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            String url = "dubbo://10.0." + (i / 250) + "." + (i % 250) + ":20880/com.example.DemoService"
                    + "?anyhost=true&application=demo-provider&deprecated=false&dubbo=2.0.2&dynamic=true"
                    + "&generic=false&interface=com.example.DemoService&methods=echo,sayGoodbye,sayHello"
                    + "&pid=" + (1000 + i) + "&release=3.3.6&service-name-mapping=true&side=provider"
                    + "&threads=200&timeout=3000&token=false&version=1.0.0&group=demo&revision=1.0.0"
                    + "&weight=" + (100 + 7 * i) + "&timestamp=" + (now - 3_600_000L - 1000L * i);
            invokers.add(new ProviderInvoker(URL.valueOf(url)));
        }
        consumerUrl = URL.valueOf("consumer://10.1.0.1/com.example.DemoService?interface=com.example.DemoService"
                + "&side=consumer&version=1.0.0&group=demo");
        directory = "bitlist".equals(list) ? new BitList<>(invokers) : null;
        polylb = "polylb".equals(impl);
        lb = polylb ? polylbBalancer(strategy) : dubboBalancer(strategy);
    }

    private static LoadBalance dubboBalancer(String strategy) {
        switch (strategy) {
            case "random":
                return new RandomLoadBalance();
            case "roundrobin":
                return new RoundRobinLoadBalance();
            case "leastactive":
                return new LeastActiveLoadBalance();
            case "shortestresponse":
                ShortestResponseLoadBalance sr = new ShortestResponseLoadBalance();
                sr.setApplicationModel(ApplicationModel.defaultModel());
                return sr;
            case "consistenthash":
                return new ConsistentHashLoadBalance();
            case "adaptive":
                return new AdaptiveLoadBalance(ApplicationModel.defaultModel());
            default:
                throw new IllegalArgumentException(strategy);
        }
    }

    private static LoadBalance polylbBalancer(String strategy) {
        switch (strategy) {
            case "random":
                return new PolylbLoadBalance.Random();
            case "roundrobin":
                return new PolylbLoadBalance.RoundRobin();
            case "leastactive":
                return new PolylbLoadBalance.LeastActive();
            case "shortestresponse":
                return new PolylbLoadBalance.ShortestResponse();
            case "consistenthash":
                return new PolylbLoadBalance.ConsistentHash();
            case "adaptive":
                return new PolylbLoadBalance.Adaptive();
            default:
                throw new IllegalArgumentException(strategy);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        if (lb instanceof PolylbLoadBalance) {
            ((PolylbLoadBalance) lb).destroy();
        }
    }

    /** One benchmark thread's invocations (the same 1000 arguments in every thread). */
    @State(Scope.Thread)
    public static class Calls {
        RpcInvocation[] invocations;
        int cursor;

        @Setup(Level.Trial)
        public void setUp() {
            SplittableRandom random = new SplittableRandom(42);
            invocations = new RpcInvocation[1000];
            for (int i = 0; i < invocations.length; i++) {
                StringBuilder arg = new StringBuilder();
                for (int c = 0; c < 16; c++) {
                    arg.append((char) ('a' + random.nextInt(26)));
                }
                invocations[i] = new RpcInvocation("sayHello", "com.example.DemoService",
                        "demo/com.example.DemoService:1.0.0", new Class<?>[] {String.class},
                        new Object[] {arg.toString()});
            }
        }

        RpcInvocation next() {
            return invocations[cursor++ % invocations.length];
        }
    }

    @Benchmark
    public Invoker<Object> select(Calls calls) {
        RpcInvocation invocation = calls.next();
        List<Invoker<Object>> routed = directory == null ? invokers : directory.clone();
        if (polylb) {
            PolylbClusterFilter.beginInvocation(invocation);
        }
        Invoker<Object> chosen = lb.select(routed, consumerUrl, invocation);
        if (polylb) {
            AdapterCalls.answered(invokerFilter, answer, chosen, invocation);
            PolylbClusterFilter.releaseUnsent(invocation);
        }
        return chosen;
    }
}
