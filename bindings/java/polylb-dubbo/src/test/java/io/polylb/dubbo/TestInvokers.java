package io.polylb.dubbo;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.cluster.Directory;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.ApplicationModel;

/** Plain Dubbo invokers and invocations, as Dubbo's own load-balancer tests build them. */
final class TestInvokers {
    static final String SERVICE = "com.example.DemoService";

    private TestInvokers() {}

    static class FakeInvoker implements Invoker<Object> {
        private final URL url;
        volatile boolean available = true;

        FakeInvoker(URL url) {
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
            return available;
        }

        @Override
        public void destroy() {
            available = false;
        }

        @Override
        public String toString() {
            return url.getAddress();
        }
    }

    /** A provider that counts, in {@code reads}, how often the adapter asks whether it is available. */
    static final class CountingInvoker extends FakeInvoker {
        private final AtomicLong reads;

        CountingInvoker(URL url, AtomicLong reads) {
            super(url);
            this.reads = reads;
        }

        @Override
        public boolean isAvailable() {
            reads.incrementAndGet();
            return super.isAvailable();
        }
    }

    /**
     * A cluster invoker (one registry's, in multi-registry and zone-aware set-ups): Dubbo reads
     * weights from its registry URL. Tests that send through it override {@link #invoke}.
     */
    static class FakeClusterInvoker extends FakeInvoker implements ClusterInvoker<Object> {
        private final URL registryUrl;

        FakeClusterInvoker(URL url, URL registryUrl) {
            super(url);
            this.registryUrl = registryUrl;
        }

        @Override
        public URL getRegistryUrl() {
            return registryUrl;
        }

        @Override
        public Directory<Object> getDirectory() {
            return null;
        }

        @Override
        public boolean isDestroyed() {
            return false;
        }
    }

    /** The default application's instance of the polylb extension registered as {@code name}. */
    static PolylbLoadBalance extension(String name) {
        return (PolylbLoadBalance) ApplicationModel.defaultModel().getExtensionLoader(LoadBalance.class).getExtension(name);
    }

    static FakeInvoker invoker(int n, String params) {
        String query = params == null || params.isEmpty() ? "" : "?" + params;
        return new FakeInvoker(URL.valueOf("dubbo://10.0.0." + n + ":20880/" + SERVICE + query));
    }

    /** Providers 1..n with the given URL parameters each (null = none). */
    static List<Invoker<Object>> invokers(String... params) {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 0; i < params.length; i++) {
            list.add(invoker(i + 1, params[i]));
        }
        return list;
    }

    /**
     * A provider URL's query with the parameters Dubbo's getWeight reads, each left out when null:
     * {@code side=provider}, {@code weight}, {@code sayHello.weight} (a method weight), {@code
     * timestamp} (the provider's start: {@code nowMs - uptimeMs}) and {@code warmup}.
     */
    static String weightParams(Integer weight, Integer sayHelloWeight, Long uptimeMs, String warmup, long nowMs) {
        StringBuilder p = new StringBuilder("side=provider");
        if (weight != null) {
            p.append("&weight=").append(weight);
        }
        if (sayHelloWeight != null) {
            p.append("&sayHello.weight=").append(sayHelloWeight);
        }
        if (uptimeMs != null) {
            p.append("&timestamp=").append(nowMs - uptimeMs);
        }
        if (warmup != null) {
            p.append("&warmup=").append(warmup);
        }
        return p.toString();
    }

    static List<Invoker<Object>> weighted(int... weights) {
        List<Invoker<Object>> list = new ArrayList<>();
        for (int i = 0; i < weights.length; i++) {
            list.add(invoker(i + 1, "weight=" + weights[i]));
        }
        return list;
    }

    static RpcInvocation call(String method, Object... args) {
        Class<?>[] types = new Class<?>[args.length];
        for (int i = 0; i < args.length; i++) {
            types[i] = args[i] == null ? Object.class : args[i].getClass();
        }
        return new RpcInvocation(method, SERVICE, SERVICE, types, args);
    }

    /** A generic call, as GenericService.$invoke(method, types, args) sends it. */
    static RpcInvocation genericCall(String method, Object... args) {
        String[] types = new String[args.length];
        java.util.Arrays.fill(types, "java.lang.String");
        return new RpcInvocation("$invoke", SERVICE, SERVICE,
                new Class<?>[] {String.class, String[].class, Object[].class}, new Object[] {method, types, args});
    }
}
