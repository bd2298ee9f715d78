package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.LoadBalancerRegistry;
import io.grpc.NameResolver.ConfigOrError;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The service-config entry: parsed, and a bad config string rejected with the library's message. */
class ProviderConfigTest {
    private final PolylbLoadBalancerProvider provider = new PolylbLoadBalancerProvider();

    @Test
    void theServiceLoaderRegistersThePolicy() {
        assertTrue(LoadBalancerRegistry.getDefaultRegistry().getProvider("polylb") instanceof PolylbLoadBalancerProvider);
    }

    @Test
    void aGoodEntryParses() {
        ConfigOrError parsed = provider.parseLoadBalancingPolicyConfig(
                Map.of("config", "loadbalance=p2c", "serviceLevel", true));
        assertNull(parsed.getError());
        assertEquals(new PolylbConfig("loadbalance=p2c", true), parsed.getConfig());
        assertEquals(new PolylbConfig("", false), provider.parseLoadBalancingPolicyConfig(Map.of()).getConfig());
    }

    @Test
    void aBadKeyIsNamedWithTheNearestValidOne() {
        ConfigOrError parsed = provider.parseLoadBalancingPolicyConfig(Map.of("config", "loadbalance=consistenthash&hash.node=160"));
        Status error = parsed.getError();
        assertEquals(Status.Code.INVALID_ARGUMENT, error.getCode());
        assertTrue(error.getDescription().contains("hash.node") && error.getDescription().contains("hash.nodes"),
                error.getDescription());
    }

    @Test
    void anUnknownKeyIsRejectedNotIgnored() {
        for (Map<String, ?> entry : List.of(Map.of("confg", "loadbalance=peakewma"),
                Map.of("Config", "loadbalance=peakewma"),
                Map.of("config", "loadbalance=p2c", "service_level", true))) {
            Status error = provider.parseLoadBalancingPolicyConfig(entry).getError();
            assertNotNull(error, entry.toString());
            assertEquals(Status.Code.INVALID_ARGUMENT, error.getCode());
            assertTrue(error.getDescription().contains("unknown key")
                    && error.getDescription().contains("\"serviceLevel\""), error.getDescription());
        }
    }

    @Test
    void wrongTypesAreRejected() {
        assertEquals(Status.Code.INVALID_ARGUMENT,
                provider.parseLoadBalancingPolicyConfig(Map.of("config", 5.0)).getError().getCode());
        assertEquals(Status.Code.INVALID_ARGUMENT,
                provider.parseLoadBalancingPolicyConfig(Map.of("serviceLevel", "yes")).getError().getCode());
    }

    @Test
    void aChannelWithABadConfigFailsToBuild() {
        Exception e = assertThrows(RuntimeException.class, () -> new Client("loadbalance=peakewma&peakewma.decy=5000",
                List.of()).close());
        assertTrue(String.valueOf(e.getMessage()).contains("peakewma.decy"), e.toString());
    }
}
