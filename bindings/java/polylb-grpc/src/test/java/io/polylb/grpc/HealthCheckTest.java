package io.polylb.grpc;

import static io.polylb.grpc.Client.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * gRPC's client-side health checking ({@code healthCheckConfig}, grpc-services on the classpath):
 * an endpoint whose server reports NOT_SERVING leaves the picker — no call reaches it — and keeps
 * its state in the library's set; it takes calls again once it reports SERVING.
 */
class HealthCheckTest {
    private static Provider withHealth(String name, HealthStatusManager health) throws Exception {
        return new Provider(name, NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
                .addService(health.getHealthService()));
    }

    /** Picks of invoker 1, the first endpoint the resolver listed. */
    private static long selectedOfFirst(Client client) {
        for (JsonElement invoker : client.stats().getAsJsonArray("invokers")) {
            if (invoker.getAsJsonObject().get("id").getAsLong() == 1) {
                return invoker.getAsJsonObject().get("selected").getAsLong();
            }
        }
        throw new AssertionError("no invoker 1 in " + client.stats());
    }

    @Test
    void anEndpointReportingNotServingLeavesThePicker() throws Exception {
        assertTrue(HealthChecking.available(), "grpc-services is on the tests' classpath");
        HealthStatusManager sickHealth = new HealthStatusManager();
        HealthStatusManager wellHealth = new HealthStatusManager();
        try (Provider sick = withHealth("sick", sickHealth);
                Provider well = withHealth("well", wellHealth);
                Client client = new Client("loadbalance=roundrobin", false,
                        List.of(sick.endpoint(), well.endpoint()), true,
                        Map.of("healthCheckConfig", Map.of("serviceName", "")))) {
            client.waitForSet(2);
            for (int i = 0; i < 20; i++) {
                client.call("");
            }
            assertEquals(10, sick.calls.get(), "round robin over two healthy endpoints");

            sickHealth.setStatus("", ServingStatus.NOT_SERVING);
            eventually(() -> client.readyEndpoints() == 1, "the unhealthy endpoint out of the picker");
            int before = sick.calls.get();
            for (int i = 0; i < 20; i++) {
                client.call("");
            }
            assertEquals(before, sick.calls.get(), "calls reached the endpoint reporting NOT_SERVING");
            assertEquals(2, client.setSize(), "the unhealthy endpoint stays in the set");
            assertEquals(10, selectedOfFirst(client), "and keeps its state");

            sickHealth.setStatus("", ServingStatus.SERVING);
            eventually(() -> client.readyEndpoints() == 2, "the endpoint back in the picker");
            before = sick.calls.get();
            for (int i = 0; i < 20; i++) {
                client.call("");
            }
            assertEquals(before + 10, sick.calls.get(), "back to SERVING: round robin's half");
        }
    }
}
