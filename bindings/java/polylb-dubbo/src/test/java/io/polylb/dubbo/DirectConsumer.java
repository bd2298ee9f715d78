package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.cluster.Directory;
import org.apache.dubbo.rpc.model.FrameworkModel;

/**
 * A real Dubbo consumer of {@code service} at direct URLs (no registry), in its own FrameworkModel
 * so that its polylb stats start fresh: a failover cluster over the LoadBalance extension named
 * {@code loadbalance}, {@code check=false}. The proxy is {@code reference.get()}. Closing it stops
 * the bootstrap and destroys the FrameworkModel.
 */
class DirectConsumer<T> implements AutoCloseable {
    final FrameworkModel framework = new FrameworkModel();
    final ReferenceConfig<T> reference = new ReferenceConfig<>();
    final DubboBootstrap bootstrap;
    private final Class<T> service;
    private final String loadbalance;

    /** Started, under the application name {@code application}. */
    DirectConsumer(String application, Class<T> service, String urls, String loadbalance, int retries,
            int timeoutMs, boolean async) {
        this(application, service, urls, loadbalance, retries, timeoutMs, async, Map.of());
    }

    /** The same, with the reference's URL {@code parameters} (e.g. Dubbo's {@code payload} limit). */
    DirectConsumer(String application, Class<T> service, String urls, String loadbalance, int retries,
            int timeoutMs, boolean async, Map<String, String> parameters) {
        this.service = service;
        this.loadbalance = loadbalance;
        reference.setInterface(service);
        reference.setUrl(urls);
        reference.setLoadbalance(loadbalance);
        reference.setCluster("failover");
        reference.setRetries(retries);
        reference.setTimeout(timeoutMs);
        reference.setCheck(false);
        reference.setAsync(async);
        if (!parameters.isEmpty()) {
            reference.setParameters(new HashMap<>(parameters));
        }
        bootstrap = DubboBootstrap.newInstance(framework)
                .application(InJvmProviders.application(application))
                .registry(new RegistryConfig("N/A"))
                .reference(reference)
                .start();
    }

    /**
     * Returns once every provider's connection is up (up to 20 s): Triple connects in the
     * background, and a call that finds a provider unconnected fails it and sets it aside for
     * reconnection.
     */
    void awaitConnected() throws InterruptedException {
        Directory<?> directory = ((ClusterInvoker<?>) reference.getInvoker()).getDirectory();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!allAvailable(directory) && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertTrue(allAvailable(directory), "not connected: " + directory.getAllInvokers());
    }

    private static boolean allAvailable(Directory<?> directory) {
        List<? extends Invoker<?>> invokers = directory.getAllInvokers();
        return !invokers.isEmpty() && invokers.stream().allMatch(Invoker::isAvailable);
    }

    /** polylb's counters for the service, summed over its invokers. */
    ServiceCounters counters() {
        return ServiceCounters.read(bootstrap, loadbalance, service.getName());
    }

    /** Waits until polylb counts no call in flight; returns the counters then. */
    ServiceCounters awaitNoneInFlight() throws InterruptedException {
        return ServiceCounters.awaitNoneInFlight(bootstrap, loadbalance, service.getName());
    }

    @Override
    public void close() {
        bootstrap.stop();
        framework.destroy();
    }

    /**
     * Closes every consumer of {@code consumers} and empties the list: a stop that fails is
     * passed over (best effort at the end of a test class), the model destroyed all the same.
     */
    static void closeAll(List<? extends DirectConsumer<?>> consumers) {
        for (DirectConsumer<?> consumer : consumers) {
            try {
                consumer.bootstrap.stop();
            } catch (RuntimeException ignored) {
                // best effort
            }
            consumer.framework.destroy();
        }
        consumers.clear();
    }
}
