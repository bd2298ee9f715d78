package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.Outcome;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.config.ProtocolConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A provider shedding load by its TPS limit ({@code tps}, Dubbo's TpsLimitFilter): from Dubbo 3.2
 * on it returns its refusal as a response carrying an RpcException, which the consumer must count
 * as the provider's failure, not as an answer of the service's (docs/outcomes.md). Real Dubbo,
 * dubbo protocol over loopback.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ProviderLimitsTest {
    static final String LB = "polylb-leastactive";
    static final List<FrameworkModel> FRAMEWORKS = new ArrayList<>();
    static final List<DubboBootstrap> PROVIDERS = new ArrayList<>();
    static String url;

    @BeforeAll
    static void start() throws Exception {
        List<String> urls = new ArrayList<>();
        for (String name : new String[] {"T1", "T2"}) {
            int port = InJvmProviders.freeLoopbackPort();
            FrameworkModel framework = new FrameworkModel();
            FRAMEWORKS.add(framework);
            ProtocolConfig protocol = new ProtocolConfig("dubbo", port);
            protocol.setHost("127.0.0.1");
            protocol.setSerialization("hessian2");
            ServiceConfig<LaterService> config = new ServiceConfig<>();
            config.setInterface(LaterService.class);
            config.setRef(new SleepingLater(name));
            config.setRegister(false);
            // One call a minute: every call after the first is refused by the provider's TpsLimitFilter.
            config.setParameters(Map.of("tps", "1", "tps.interval", "60000"));
            PROVIDERS.add(DubboBootstrap.newInstance(framework)
                    .application(InJvmProviders.application("tps-provider"))
                    .registry(new RegistryConfig("N/A")).protocol(protocol).service(config).start());
            urls.add("dubbo://127.0.0.1:" + port + "/" + LaterService.class.getName());
        }
        url = String.join(";", urls);
    }

    @AfterAll
    static void stop() {
        PROVIDERS.forEach(DubboBootstrap::stop);
        FRAMEWORKS.forEach(FrameworkModel::destroy);
    }

    @Test
    void aProviderOverItsTpsLimitIsAFailure() throws Exception {
        try (DirectConsumer<LaterService> consumer = new DirectConsumer<>("tps-consumer", LaterService.class,
                url, LB, 0, 5000, false)) {
            LaterService later = consumer.reference.get();
            int answered = 0;
            int refused = 0;
            for (int i = 0; i < 10; i++) {
                try {
                    later.later("call-" + i, 0);
                    answered++;
                } catch (RpcException e) {
                    refused++;
                }
            }
            ServiceCounters c = consumer.awaitNoneInFlight();
            // Each provider answers one call a minute and refuses the rest: the refusals are
            // load shedding by the provider, failures (docs/outcomes.md), not answers. (Both
            // providers answer one unless every call went to one: 2 in 1,024.)
            assertEquals(10, answered + refused);
            assertTrue(answered == 1 || answered == 2, "answered " + answered);
            assertEquals(List.of(answered, refused), List.of(c.succeeded, c.failures), c.toString());
        }
    }

    @Test
    void theRefusalsAreToldFromBusinessExceptions() {
        // What the consumer finds in the response: TpsLimitFilter's RpcException (code 0).
        RpcException tps = new RpcException(
                "Failed to invoke service io.polylb.dubbo.LaterService.later because exceed max service tps.");
        assertEquals(Outcome.FAILURE, PolylbInvokerFilter.outcomeOf(tps, null));
        RpcException limit = new RpcException(RpcException.LIMIT_EXCEEDED_EXCEPTION, "over the limit");
        assertEquals(Outcome.FAILURE, PolylbInvokerFilter.outcomeOf(limit, null));
        // The service's own exceptions stay its answers.
        assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.outcomeOf(new IllegalArgumentException("bad"), null));
        assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.outcomeOf(
                new RpcException(RpcException.BIZ_EXCEPTION, "the service's own"), null));
        assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.outcomeOf(new RpcException("the service's own"), null));
    }
}
