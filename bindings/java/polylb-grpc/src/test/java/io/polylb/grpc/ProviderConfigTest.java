package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.CallOptions;
import io.grpc.LoadBalancerRegistry;
import io.grpc.ManagedChannel;
import io.grpc.NameResolver.ConfigOrError;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
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
    void theOutOfBandOptionsParse() {
        assertEquals(new PolylbConfig("loadbalance=orca", false, true, 50_000_000L),
                provider.parseLoadBalancingPolicyConfig(Map.of("config", "loadbalance=orca",
                        "enableOobLoadReport", true, "oobReportingPeriod", "0.05s")).getConfig());
        assertEquals(new PolylbConfig("loadbalance=orca", false, true, 10_000_000_000L),
                provider.parseLoadBalancingPolicyConfig(Map.of("config", "loadbalance=orca",
                        "enableOobLoadReport", true)).getConfig(), "gRFC A58's default period, 10 s");
        assertEquals(new PolylbConfig("loadbalance=orca", false),
                provider.parseLoadBalancingPolicyConfig(Map.of("config", "loadbalance=orca")).getConfig(), "off by default");
        assertEquals(1_500_000_000L, PolylbLoadBalancerProvider.durationNanos("1.5s"));
        assertEquals(30_000_000_000L, PolylbLoadBalancerProvider.durationNanos("30s"));
        assertEquals(1L, PolylbLoadBalancerProvider.durationNanos("0.000000001s"));
        assertEquals(0L, PolylbLoadBalancerProvider.durationNanos("0s"));
        for (Object bad : List.of("10", "-1s", "1.5 s", "1.0000000001s", "10ms", "", 10.0, true)) {
            Status error = provider.parseLoadBalancingPolicyConfig(
                    Map.of("config", "loadbalance=orca", "enableOobLoadReport", true, "oobReportingPeriod", bad)).getError();
            assertNotNull(error, "oobReportingPeriod " + bad);
            assertEquals(Status.Code.UNAVAILABLE, error.getCode());
            assertTrue(error.getDescription().contains("oobReportingPeriod"), error.getDescription());
        }
        assertEquals(Status.Code.UNAVAILABLE, provider.parseLoadBalancingPolicyConfig(
                Map.of("enableOobLoadReport", "true")).getError().getCode());
        Status misspelt = provider.parseLoadBalancingPolicyConfig(Map.of("enable_oob_load_report", true)).getError();
        assertTrue(misspelt.getDescription().contains("unknown key") && misspelt.getDescription().contains("\"enableOobLoadReport\""),
                misspelt.getDescription());
    }

    @Test
    void aBadKeyIsNamedWithTheNearestValidOne() {
        ConfigOrError parsed = provider.parseLoadBalancingPolicyConfig(Map.of("config", "loadbalance=consistenthash&hash.node=160"));
        Status error = parsed.getError();
        assertEquals(Status.Code.UNAVAILABLE, error.getCode());
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
            assertEquals(Status.Code.UNAVAILABLE, error.getCode());
            assertTrue(error.getDescription().contains("unknown key")
                    && error.getDescription().contains("\"serviceLevel\""), error.getDescription());
        }
    }

    /**
     * A megabyte of service config makes a status of a kilobyte or so: what the policy repeats of
     * it is cut, as the library cuts what it quotes, and its length said.
     */
    @Test
    void aHugeConfigMakesAShortStatus() {
        String huge = "x".repeat(1 << 20);
        for (Map<String, ?> entry : List.of(Map.of("config", "loadbalance=p2c&" + huge + "=1"),
                Map.of("config", "loadbalance=" + huge),
                Map.of(huge, 1),
                Map.of("config", "", "oobReportingPeriod", huge),
                Map.of("config", huge, "serviceLevel", "yes"))) {
            String description = provider.parseLoadBalancingPolicyConfig(entry).getError().getDescription();
            assertTrue(description.length() < 4096 && description.contains(" bytes)"),
                    description.length() + " characters: " + description.substring(0, 300));
        }
        String wide = "\u00e9".repeat(Excerpts.CHARS);
        assertEquals("\"" + wide + "\"", Excerpts.quoted(wide));
        assertEquals("\"" + wide + "…\" (1025 bytes)", Excerpts.quoted(wide + "z"));
        String astral = "\ud83d\ude00".repeat(Excerpts.CHARS + 1);
        assertEquals(astral.substring(0, 2 * Excerpts.CHARS) + "… (2052 bytes)", Excerpts.excerpt(astral),
                "cut between characters, not inside a surrogate pair");
    }

    @Test
    void wrongTypesAreRejected() {
        assertEquals(Status.Code.UNAVAILABLE,
                provider.parseLoadBalancingPolicyConfig(Map.of("config", 5.0)).getError().getCode());
        assertEquals(Status.Code.UNAVAILABLE,
                provider.parseLoadBalancingPolicyConfig(Map.of("serviceLevel", "yes")).getError().getCode());
    }

    /**
     * A bad config from the resolver (no default to fall back on) fails RPCs UNAVAILABLE with the
     * library's message, as grpc-go does: INVALID_ARGUMENT would reach them as INTERNAL.
     */
    @Test
    @SuppressWarnings("deprecation") // nameResolverFactory: the simplest way to a test resolver
    void rpcsOnAChannelWhoseResolverSentABadConfigFailUnavailable() throws Exception {
        try (Provider provider = new Provider("a")) {
            ManualResolver resolver = new ManualResolver(List.of(provider.endpoint()));
            resolver.setServiceConfig(Map.of("loadBalancingConfig",
                    List.of(Map.of("polylb", Map.of("config", "loadbalance=peakewma&peakewma.decy=5000")))));
            ManagedChannel channel = NettyChannelBuilder.forTarget(ManualResolver.SCHEME + ":///providers")
                    .nameResolverFactory(resolver)
                    .usePlaintext()
                    .build();
            try {
                StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
                        () -> ClientCalls.blockingUnaryCall(channel, EchoService.CALL,
                                CallOptions.DEFAULT.withDeadlineAfter(10, TimeUnit.SECONDS), ""));
                assertEquals(Status.Code.UNAVAILABLE, e.getStatus().getCode(), e.toString());
                assertTrue(String.valueOf(e.getStatus().getDescription()).contains("peakewma.decy"), e.toString());
            } finally {
                channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
            }
        }
    }

    @Test
    void aChannelWithABadConfigFailsToBuild() {
        Exception e = assertThrows(RuntimeException.class, () -> new Client("loadbalance=peakewma&peakewma.decy=5000",
                List.of()).close());
        assertTrue(String.valueOf(e.getMessage()).contains("peakewma.decy"), e.toString());
    }
}
