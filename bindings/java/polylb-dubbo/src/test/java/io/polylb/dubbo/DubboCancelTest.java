package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.remoting.TimeoutException;
import org.apache.dubbo.rpc.FutureContext;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A user cancels an async call's future, through each way a Dubbo 3.3 consumer gets one, while
 * the provider (real Dubbo, dubbo protocol over loopback) goes on and answers successfully later.
 * A cancel is no verdict on the provider: polylb must never count it as a failure (it would feed
 * outlier ejection and peakewma's failure penalty).
 *
 * <p>Dubbo's filters each wrap the call's future in a derived one ({@code whenComplete}) and put
 * a {@code FutureAdapter} of the outermost in the RpcContext; cancelling that cancels only the
 * outermost future, so {@link PolylbInvokerFilter}, which hangs on the innermost, sees the
 * provider's real answer: a success, once it arrives. The "compatible" future Dubbo keeps for
 * 2.6.x-style code ({@code FutureContext.getCompatibleCompletableFuture()}) is the call's own
 * future: cancelling it completes the filter's callback at once with a CancellationException,
 * which must be reported as {@code CANCELLED} (only the in-flight count undone).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DubboCancelTest {
    static final String LB = "polylb-leastactive";
    static final String[] NAMES = {"A", "B"};
    /** The callIds the providers finished answering. */
    static final Set<String> ANSWERED = ConcurrentHashMap.newKeySet();

    @RegisterExtension
    static final InJvmProviders<LaterService> PROVIDERS = new InJvmProviders<>(LaterService.class,
            "cancel-provider-", NAMES, name -> new SleepingLater(name, ANSWERED));

    /** A consumer in its own FrameworkModel, so each case starts from fresh polylb stats. */
    static final class Consumer extends DirectConsumer<LaterService> {
        final LaterService later;

        Consumer(boolean async) {
            super("cancel-consumer", LaterService.class, PROVIDERS.directUrls(), LB, 0, 10_000, async);
            later = reference.get();
            // Warm up (connection, serialization); its successes are subtracted below.
            for (int i = 0; i < 2; i++) {
                later.later("warmup-" + i, 0);
                if (async) {
                    try {
                        RpcContext.getServiceContext().getCompletableFuture().get(10, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        throw new AssertionError(e);
                    }
                }
            }
        }
    }

    /** How a case makes one call and gets the future the user cancels. */
    interface Call {
        Future<?> start(LaterService later, String callId, int delayMs) throws Exception;
    }

    static final int CALLS = 3;
    static final int DELAY_MS = 1500;

    /**
     * Makes {@link #CALLS} calls the providers answer after {@link #DELAY_MS}, cancels each at
     * once, then waits for the providers' answers; returns polylb's counters for those calls.
     */
    private static ServiceCounters cancelEach(String name, boolean async, Call call, boolean cancelTakes)
            throws Exception {
        try (Consumer consumer = new Consumer(async)) {
            ServiceCounters warm = consumer.awaitNoneInFlight();
            List<String> ids = new ArrayList<>();
            for (int i = 0; i < CALLS; i++) {
                String id = name + "-" + i;
                ids.add(id);
                Future<?> future = call.start(consumer.later, id, DELAY_MS);
                assertNotNull(future, name + ": no future");
                assertFalse(future.isDone(), name + ": done before the provider answered");
                assertEquals(cancelTakes, future.cancel(true), name + ": cancel's result");
            }
            ServiceCounters atCancel = consumer.counters();
            // Every provider answered: whatever polylb waited for has arrived.
            awaitAnswered(name, ids);
            ServiceCounters end = consumer.awaitNoneInFlight();
            end.selected -= warm.selected;
            end.succeeded -= warm.succeeded;
            end.failures -= warm.failures;
            end.timeouts -= warm.timeouts;
            atCancel.selected -= warm.selected;
            atCancel.succeeded -= warm.succeeded;
            atCancel.failures -= warm.failures;
            atCancel.timeouts -= warm.timeouts;
            System.out.println("cancel via " + name + ": right after cancel " + atCancel + "; after the answers "
                    + end);
            assertEquals(CALLS, end.selected, name + ": " + end);
            assertEquals(0, end.failures, name + ": a user's cancel was counted as a failure: " + end);
            assertEquals(0, end.timeouts, name + ": " + end);
            return end;
        }
    }

    private static void awaitAnswered(String name, List<String> ids) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!ANSWERED.containsAll(ids) && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertTrue(ANSWERED.containsAll(ids), name + ": the providers did not answer " + ids);
    }

    /**
     * The usual ways: the cancel does not reach the call's own future, so polylb records the
     * provider's real answer (a success, with its latency) when it arrives.
     */
    private static void answerIsReported(String name, boolean async, Call call, boolean cancelTakes)
            throws Exception {
        ServiceCounters c = cancelEach(name, async, call, cancelTakes);
        assertEquals(CALLS, c.succeeded, name + ": the provider's answer was not reported as a success: " + c);
        assertEquals(0, c.cancelled(), name + ": " + c);
    }

    @Test
    void aCompletableFutureMethodsFuture() throws Exception {
        answerIsReported("CompletableFuture method", false,
                (later, id, delay) -> later.laterFuture(id, delay), true);
    }

    @Test
    void theServiceContextsCompletableFuture() throws Exception {
        answerIsReported("getServiceContext().getCompletableFuture()", true, (later, id, delay) -> {
            later.later(id, delay);
            return RpcContext.getServiceContext().getCompletableFuture();
        }, true);
    }

    @Test
    @SuppressWarnings("deprecation")
    void theContextsFuture() throws Exception {
        answerIsReported("RpcContext.getContext().getFuture()", true, (later, id, delay) -> {
            later.later(id, delay);
            return RpcContext.getContext().getFuture();
        }, true);
    }

    @Test
    void anAsyncCallsFuture() throws Exception {
        answerIsReported("getServiceContext().asyncCall()", false,
                (later, id, delay) -> RpcContext.getServiceContext().asyncCall(() -> later.later(id, delay)), true);
    }

    @Test
    void theAlibabaContextsFuture() throws Exception {
        // com.alibaba's FutureAdapter ignores cancel (returns false); the call goes on.
        answerIsReported("com.alibaba RpcContext.getContext().getFuture()", true, (later, id, delay) -> {
            later.later(id, delay);
            return com.alibaba.dubbo.rpc.RpcContext.getContext().getFuture();
        }, false);
    }

    @Test
    @SuppressWarnings("deprecation")
    void theCompatibleFutureIsCancelledNotFailed() throws Exception {
        // The call's own future: the filter's callback completes at the cancel, with a
        // CancellationException. polylb must record a cancel, not a failure, and at once.
        ServiceCounters c = cancelEach("FutureContext.getCompatibleCompletableFuture()", true, (later, id, delay) -> {
            later.later(id, delay);
            return FutureContext.getContext().getCompatibleCompletableFuture();
        }, true);
        assertEquals(0, c.succeeded, c.toString());
        assertEquals(CALLS, c.cancelled(), c.toString());
    }

    @Test
    @SuppressWarnings("deprecation")
    void theCompatibleFuturesCancelEndsThePickAtOnce() throws Exception {
        try (Consumer consumer = new Consumer(true)) {
            ServiceCounters warm = consumer.awaitNoneInFlight();
            consumer.later.later("at-once", 3000);
            CompletableFuture<Object> future = FutureContext.getContext().getCompatibleCompletableFuture();
            assertEquals(1, consumer.counters().active);
            assertTrue(future.cancel(true));
            ServiceCounters c = consumer.counters();
            // Reported in the cancelling thread, long before the provider's answer.
            assertEquals(0, c.active, c.toString());
            assertEquals(0, c.failures - warm.failures, c.toString());
            assertEquals(1, c.cancelled() - warm.cancelled(), c.toString());
            awaitAnswered("at-once", List.of("at-once"));
            c = consumer.awaitNoneInFlight();
            assertEquals(warm.succeeded, c.succeeded, "the late answer was reported too: " + c);
        }
    }

    @Test
    void cancellationsAreToldFromTimeoutsAndFailures() {
        // Seen raw when the cancelled future is the one the callback hangs on; wrapped when a
        // future between them derives from it.
        CancellationException cancel = new CancellationException();
        assertTrue(PolylbInvokerFilter.isCancellation(cancel));
        assertTrue(PolylbInvokerFilter.isCancellation(new CompletionException(cancel)));
        assertTrue(PolylbInvokerFilter.isCancellation(new ExecutionException(cancel)));
        assertFalse(PolylbInvokerFilter.isTimeout(new CompletionException(cancel)));
        TimeoutException timeout = new TimeoutException(false, null, "t");
        assertFalse(PolylbInvokerFilter.isCancellation(new CompletionException(timeout)));
        assertTrue(PolylbInvokerFilter.isTimeout(new CompletionException(timeout)));
        assertFalse(PolylbInvokerFilter.isCancellation(new RpcException("boom")));
        assertFalse(PolylbInvokerFilter.isCancellation(new CompletionException(new IllegalStateException())));
    }
}
