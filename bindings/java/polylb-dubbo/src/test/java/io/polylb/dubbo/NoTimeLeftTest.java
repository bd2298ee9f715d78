package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.common.constants.CommonConstants;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.TimeoutCountDown;
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

    @RegisterExtension
    static final InJvmProviders<LaterService> PROVIDERS =
            new InJvmProviders<>(LaterService.class, "no-time-left-provider-", NAMES, SleepingLater::new);

    @Test
    void aRetryWithNoTimeLeftIsNeverSentAndIsNoVerdict() throws Exception {
        try (DirectConsumer<LaterService> consumer = new DirectConsumer<>("no-time-left-consumer",
                LaterService.class, PROVIDERS.directUrls(), LB, 1, 10_000, false)) {
            LaterService later = consumer.reference.get();
            assertTrue(List.of(NAMES).contains(later.later("warmup", 0)));
            ServiceCounters warm = consumer.counters();
            assertEquals(List.of(1, 0, 0, 0, 0),
                    List.of(warm.succeeded, warm.failures, warm.timeouts, warm.cancelled(), warm.active),
                    warm.toString());

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
            ServiceCounters c = consumer.counters();
            String what = "failures include timeouts: " + c;
            assertEquals(List.of(1, 1, 1), List.of(c.succeeded, c.failures, c.timeouts), what);
            assertTrue(c.cancelled() >= 1, what);
            assertEquals(0, c.active, what);
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
