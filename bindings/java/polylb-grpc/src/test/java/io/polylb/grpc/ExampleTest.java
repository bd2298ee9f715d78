package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.CallOptions;
import io.grpc.LoadBalancerRegistry;
import io.grpc.ManagedChannel;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.polylb.Balancer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** The README's example, run; and the README shows exactly this code. */
class ExampleTest {
    @Test
    @SuppressWarnings("deprecation") // nameResolverFactory, for the example's fixed endpoints
    void example() throws Exception {
        try (Provider p0 = new Provider("p0"); Provider p1 = new Provider("p1"); Provider p2 = new Provider("p2")) {
            // README-BEGIN
            AtomicReference<Balancer> lb = new AtomicReference<>();
            LoadBalancerRegistry.getDefaultRegistry().register(
                    new PolylbLoadBalancerProvider("polylb_observed", lb::set));
            ManualResolver resolver = new ManualResolver(List.of( // in production: DNS, xDS, a registry
                    p0.endpoint(),
                    p1.endpoint(),
                    PolylbGrpc.withWeight(p2.endpoint(), 200)));
            ManagedChannel channel = NettyChannelBuilder.forTarget("manual:///greeter")
                    .nameResolverFactory(resolver)
                    .usePlaintext()
                    // With the ServiceLoader's registration: [{"polylb": {...}}].
                    .defaultServiceConfig(Map.of("loadBalancingConfig", List.of(Map.of("polylb_observed",
                            Map.of("config", "loadbalance=peakewma&peakewma.decay=5000")))))
                    .build();

            for (int i = 0; i < 100; i++) {
                ClientCalls.blockingUnaryCall(channel, EchoService.CALL, CallOptions.DEFAULT.withWaitForReady(), "");
            }

            JsonObject stats = JsonParser.parseString(lb.get().statsJson()).getAsJsonObject();
            long succeeded = 0;
            long active = 0;
            for (JsonElement invoker : stats.getAsJsonArray("invokers")) {
                succeeded += invoker.getAsJsonObject().get("succeeded").getAsLong();
                active += invoker.getAsJsonObject().get("active").getAsLong();
            }
            String line = stats.get("strategy").getAsString() + ": " + succeeded + " calls reported, "
                    + active + " in flight";
            // README-END
            assertEquals("peakewma: 100 calls reported, 0 in flight", line);
            channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
            LoadBalancerRegistry.getDefaultRegistry().deregister(LoadBalancerRegistry.getDefaultRegistry()
                    .getProvider("polylb_observed"));
        }
    }

    @Test
    void readmeShowsTheExample() throws Exception {
        String source = Files.readString(Path.of("src/test/java/io/polylb/grpc/ExampleTest.java"));
        String body = source.substring(source.indexOf("// README-BEGIN\n") + 16, source.indexOf("            // README-END"));
        String unindented = body.lines().map(l -> l.length() >= 12 ? l.substring(12) : l.strip())
                .reduce((a, b) -> a + "\n" + b).orElse("");
        String readme = Files.readString(Path.of("README.md"));
        String block = readme.substring(readme.indexOf("```java\n") + 8, readme.indexOf("```", readme.indexOf("```java\n") + 8));
        assertEquals(unindented.strip(), block.strip());
    }
}
