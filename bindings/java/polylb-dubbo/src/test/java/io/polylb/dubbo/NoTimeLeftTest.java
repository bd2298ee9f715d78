package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.common.constants.CommonConstants;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.TimeoutCountDown;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A call made while serving an upstream call inherits that call's deadline ({@code
 * timeout-countdown}). When a failover's first attempt spends what is left, Dubbo does not send the
 * retry: its invoker completes the attempt at once, normally, with an RpcException of code
 * TIMEOUT_TERMINATE ("No time left"). The provider of that attempt was never asked, so polylb must
 * record neither a success (a 0-µs answer would make it look fast) nor a failure: a cancel.
 * Real Dubbo, dubbo protocol over loopback.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class NoTimeLeftTest {
    static final String LB = "polylb-leastactive";
    static final String[] NAMES = {"A", "B"};
    /** What the upstream call has left when the downstream call starts. */
    static final int BUDGET_MS = 300;
    /** Far beyond the budget, even on a loaded machine. */
    static final int SLOW_MS = 3000;

    public static final class Slow implements LaterService {
        private final String name;

        Slow(String name) {
            this.name = name;
        }

        @Override
        public String later(String callId, int delayMs) {
            try {
                Thread.sleep(delayMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return name;
        }

        @Override
        public CompletableFuture<String> laterFuture(String callId, int delayMs) {
            return CompletableFuture.completedFuture(later(callId, delayMs));
        }
    }

    @RegisterExtension
    static final InJvmProviders<LaterService> PROVIDERS =
            new InJvmProviders<>(LaterService.class, "no-time-left-provider-", NAMES, Slow::new);

    /** polylb's counters for the service, summed over its invokers: {succeeded, failures, timeouts, cancelled, active}. */
    static List<Integer> counters(DubboBootstrap bootstrap) {
        PolylbLoadBalance lb = (PolylbLoadBalance) bootstrap.getApplicationModel()
                .getExtensionLoader(LoadBalance.class).getExtension(LB);
        int active = 0;
        int selected = 0;
        int succeeded = 0;
        int failures = 0;
        int timeouts = 0;
        for (String json : lb.statsJson(LaterService.class.getName())) {
            for (JsonElement e : JsonParser.parseString(json).getAsJsonObject().getAsJsonArray("invokers")) {
                JsonObject m = e.getAsJsonObject();
                active += m.get("active").getAsInt();
                selected += m.get("selected").getAsInt();
                succeeded += m.get("succeeded").getAsInt();
                failures += m.get("failures").getAsInt();
                timeouts += m.get("timeouts").getAsInt();
            }
        }
        // Picks that ended as neither a success nor a failure were reported CANCELLED.
        int cancelled = selected - active - succeeded - failures;
        return List.of(succeeded, failures, timeouts, cancelled, active);
    }

    @Test
    void aRetryWithNoTimeLeftIsNeverSentAndIsNoVerdict() throws Exception {
        FrameworkModel framework = new FrameworkModel();
        ReferenceConfig<LaterService> reference = new ReferenceConfig<>();
        reference.setInterface(LaterService.class);
        reference.setUrl(PROVIDERS.directUrls());
        reference.setLoadbalance(LB);
        reference.setCluster("failover");
        reference.setRetries(1);
        reference.setTimeout(10_000);
        reference.setCheck(false);
        DubboBootstrap bootstrap = DubboBootstrap.newInstance(framework)
                .application(InJvmProviders.application("no-time-left-consumer"))
                .registry(new RegistryConfig("N/A"))
                .reference(reference)
                .start();
        try {
            LaterService later = reference.get();
            assertTrue(List.of(NAMES).contains(later.later("warmup", 0)));
            assertEquals(List.of(1, 0, 0, 0, 0), counters(bootstrap));

            // As if this thread served an upstream call with BUDGET_MS left (Dubbo's provider
            // side puts its countdown there; ConsumerContextFilter hands it to the call).
            RpcContext.getServerAttachment().setObjectAttachment(CommonConstants.TIME_COUNTDOWN_KEY,
                    TimeoutCountDown.newCountDown(BUDGET_MS, TimeUnit.MILLISECONDS));
            RpcException e;
            try {
                e = assertThrows(RpcException.class, () -> later.later("slow", SLOW_MS));
            } finally {
                RpcContext.getServerAttachment().removeAttachment(CommonConstants.TIME_COUNTDOWN_KEY);
            }
            // What the caller sees is the retry's "No time left" (wrapped by Dubbo's sync wait),
            // after the first attempt's timeout.
            assertTrue(hasCode(e, RpcException.TIMEOUT_TERMINATE), String.valueOf(e));

            // The first attempt timed out; the retry, never sent, is a cancel, not a success. (A
            // retry's pick Dubbo discards — the provider already tried, drawn again — is a cancel
            // too, so there may be two.)
            List<Integer> c = counters(bootstrap);
            String what = "[succeeded, failures (timeouts included), timeouts, cancelled, in flight] " + c;
            assertEquals(List.of(1, 1, 1), c.subList(0, 3), what);
            assertTrue(c.get(3) >= 1, what);
            assertEquals(0, c.get(4), what);
        } finally {
            bootstrap.stop();
            framework.destroy();
        }
    }

    private static boolean hasCode(Throwable t, int code) {
        for (; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof RpcException && ((RpcException) t).getCode() == code) {
                return true;
            }
        }
        return false;
    }

    @Test
    void noTimeLeftIsToldFromTimeoutsAndFailures() {
        RpcException noTimeLeft = new RpcException(RpcException.TIMEOUT_TERMINATE, "No time left");
        assertTrue(PolylbInvokerFilter.isNeverSent(noTimeLeft));
        assertTrue(PolylbInvokerFilter.isCancellation(noTimeLeft));
        assertTrue(PolylbInvokerFilter.isCancellation(new CompletionException(noTimeLeft)));
        assertFalse(PolylbInvokerFilter.isTimeout(noTimeLeft));
        RpcException timeout = new RpcException(RpcException.TIMEOUT_EXCEPTION, "timeout");
        assertFalse(PolylbInvokerFilter.isNeverSent(timeout));
        assertFalse(PolylbInvokerFilter.isCancellation(timeout));
        assertFalse(PolylbInvokerFilter.isNeverSent(new RpcException(RpcException.NETWORK_EXCEPTION, "down")));
        assertFalse(PolylbInvokerFilter.isNeverSent(new IllegalStateException()));
    }
}
