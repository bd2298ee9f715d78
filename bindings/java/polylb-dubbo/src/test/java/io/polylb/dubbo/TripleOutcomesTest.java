package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Int32Value;
import io.polylb.Outcome;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.rpc.FutureContext;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What polylb records for calls over Dubbo's Triple protocol ({@code tri}, HTTP/2), between a
 * real consumer and real providers in this JVM (loopback only, direct URLs, no registry).
 *
 * <p>Triple completes a unary call's future normally whatever its gRPC status, with the status (a
 * StatusRpcException) as the response's exception: DEADLINE_EXCEEDED when its DeadlineFuture's
 * timer fires, CANCELLED when that future is cancelled, UNIMPLEMENTED, UNAVAILABLE, ... from the
 * server or the transport, any code a provider's method throws. Read as a response, each of those
 * would be a success; {@link PolylbInvokerFilter} must report a timeout, a cancel, a failure, except
 * for an error of the service's own (NOT_FOUND, ...): the provider's answer, a success
 * (docs/outcomes.md).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TripleOutcomesTest {
    static final String LB = "polylb-leastactive";
    static final String[] NAMES = {"A", "B"};
    /** The callIds the providers finished answering. */
    static final Set<String> ANSWERED = ConcurrentHashMap.newKeySet();
    static final int CALLS = 3;
    /** A deadline far below what the slow calls take, even on a loaded machine. */
    static final int DEADLINE_MS = 200;
    static final int SLOW_MS = 2000;

    /** Answers {@code later} and {@code laterFuture} as a {@link SleepingLater}, recording in {@link #ANSWERED}. */
    public static final class Provider extends SleepingLater implements OutcomeService {
        Provider(String name) {
            super(name, ANSWERED);
        }

        @Override
        public String fail(String callId) {
            throw new IllegalArgumentException("business exception of " + callId + " at " + name);
        }

        @Override
        public Int32Value answerStatus(Int32Value code) {
            if (code.getValue() == -1) {
                throw new IllegalStateException("uncaught exception at " + name);
            }
            throw TriRpcStatus.fromCode(code.getValue()).withDescription("answered by " + name).asException();
        }
    }

    @RegisterExtension
    static final InJvmProviders<OutcomeService> PROVIDERS =
            new InJvmProviders<>("tri", OutcomeService.class, "tri-outcome-provider-", NAMES, Provider::new);

    /** Triple servers that do not export OutcomeService: they refuse each call of it. */
    @RegisterExtension
    static final InJvmProviders<EchoService> OTHER_SERVICE = new InJvmProviders<>("tri", EchoService.class,
            "tri-other-provider-", NAMES, name -> new EchoService() {
                @Override
                public String work(String callId, int delayMs) {
                    return name;
                }

                @Override
                public String slowOn(String slowProvider, String callId, int sleepMs) {
                    return name;
                }
            });

    /** Every consumer made, closed once all cases ran (see {@link #closeConsumers}). */
    static final List<Consumer> CONSUMERS = new ArrayList<>();

    /**
     * Closing a consumer destroys its FrameworkModel's TripleProtocol, and Dubbo's
     * TripleProtocol.destroy() closes every Triple server of the JVM (PortUnificationExchanger
     * keeps them in one static map), the providers' too. So consumers stay open until every case
     * ran; JUnit calls this before the providers' extensions stop them.
     */
    @AfterAll
    static void closeConsumers() {
        for (Consumer consumer : CONSUMERS) {
            try {
                consumer.bootstrap.stop();
            } catch (RuntimeException ignored) {
                // best effort
            }
            consumer.framework.destroy();
        }
        CONSUMERS.clear();
    }

    /**
     * A consumer in its own FrameworkModel, so each case starts from fresh polylb stats. It is
     * closed by {@link #closeConsumers}, not by the case.
     */
    static final class Consumer extends DirectConsumer<OutcomeService> {
        final OutcomeService service;

        /** A reference to {@code urls}; with {@code awaitConnected}, returns once every provider is connected. */
        Consumer(String urls, int timeoutMs, boolean async, boolean awaitConnected) throws InterruptedException {
            super("tri-outcome-consumer", OutcomeService.class, urls, LB, 0, timeoutMs, async);
            CONSUMERS.add(this);
            service = reference.get();
            if (awaitConnected) {
                awaitConnected();
            }
        }

        Consumer(String urls, int timeoutMs, boolean async) throws InterruptedException {
            this(urls, timeoutMs, async, true);
        }
    }

    private static void awaitAnswered(List<String> ids) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!ANSWERED.containsAll(ids) && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertTrue(ANSWERED.containsAll(ids), "the providers did not answer " + ids);
    }

    /** Asserts what polylb recorded, in one message: {succeeded, failures, timeouts, cancelled}. */
    private static void assertCounted(String what, ServiceCounters c, int succeeded, int failures, int timeouts,
            int cancelled) {
        System.out.println(what + ": " + c);
        assertEquals(List.of(succeeded, failures, timeouts, cancelled, 0),
                List.of(c.succeeded, c.failures, c.timeouts, c.cancelled(), c.active),
                what + ": [succeeded, failures (timeouts included), timeouts, cancelled, in flight] were " + c);
    }

    private static String describe(Throwable t) {
        StringBuilder s = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            s.append(s.length() == 0 ? "" : " <- ").append(c.getClass().getName());
            if (c instanceof RpcException) {
                s.append("(code ").append(((RpcException) c).getCode()).append(')');
            }
            s.append(": ").append(c.getMessage());
        }
        return s.toString();
    }

    @Test
    void aResponseIsASuccess() throws Exception {
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), 10_000, false);
        for (int i = 0; i < CALLS; i++) {
            String name = consumer.service.later("ok-" + i, 0);
            assertTrue(List.of(NAMES).contains(name), name);
        }
        assertCounted("responses", consumer.awaitNoneInFlight(), CALLS, 0, 0, 0);
    }

    @Test
    void aBusinessExceptionIsASuccess() throws Exception {
        // The provider answered; as over the dubbo protocol (and Dubbo's ActiveLimitFilter), its
        // business exception is no failure of the provider.
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), 10_000, false);
        for (int i = 0; i < CALLS; i++) {
            String id = "business-" + i;
            RuntimeException e = assertThrows(RuntimeException.class, () -> consumer.service.fail(id));
            System.out.println("business exception seen by the caller: " + describe(e));
        }
        assertCounted("business exceptions", consumer.awaitNoneInFlight(), CALLS, 0, 0, 0);
    }

    @Test
    void aSyncCallPastItsDeadlineIsATimeout() throws Exception {
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), DEADLINE_MS, false);
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < CALLS; i++) {
            String id = "sync-deadline-" + i;
            ids.add(id);
            RpcException e = assertThrows(RpcException.class, () -> consumer.service.later(id, SLOW_MS));
            System.out.println("sync deadline seen by the caller: " + describe(e));
        }
        assertCounted("sync deadlines", consumer.awaitNoneInFlight(), 0, CALLS, CALLS, 0);
        // The providers' late answers change nothing.
        awaitAnswered(ids);
        Thread.sleep(100);
        assertCounted("sync deadlines, after the late answers", consumer.counters(), 0, CALLS, CALLS, 0);
    }

    @Test
    void anAsyncCallPastItsDeadlineIsATimeout() throws Exception {
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), DEADLINE_MS, true);
        List<String> ids = new ArrayList<>();
        List<CompletableFuture<Object>> calls = new ArrayList<>();
        for (int i = 0; i < CALLS; i++) {
            String id = "async-deadline-" + i;
            ids.add(id);
            consumer.service.later(id, SLOW_MS); // async: returns null at once
            calls.add(RpcContext.getServiceContext().getCompletableFuture());
        }
        for (CompletableFuture<Object> call : calls) {
            ExecutionException e = assertThrows(ExecutionException.class, () -> call.get(20, TimeUnit.SECONDS));
            System.out.println("async deadline seen by the caller: " + describe(e));
        }
        assertCounted("async deadlines", consumer.awaitNoneInFlight(), 0, CALLS, CALLS, 0);
        awaitAnswered(ids);
        Thread.sleep(100);
        assertCounted("async deadlines, after the late answers", consumer.counters(), 0, CALLS, CALLS, 0);
    }

    @Test
    @SuppressWarnings("deprecation")
    void cancellingTheCallsOwnFutureIsACancel() throws Exception {
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), 10_000, true);
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < CALLS; i++) {
            String id = "cancel-" + i;
            ids.add(id);
            consumer.service.later(id, 3000);
            // Triple's own future of the call (its DeadlineFuture).
            CompletableFuture<Object> future = FutureContext.getContext().getCompatibleCompletableFuture();
            assertFalse(future.isDone(), "done before the provider answered");
            assertEquals(1, consumer.counters().active, consumer.counters().toString());
            assertTrue(future.cancel(true));
            // DeadlineFuture.cancel completes it normally, with the status CANCELLED as the
            // response's exception (and Dubbo's generic code): not a CancellationException.
            Object response = future.get(20, TimeUnit.SECONDS);
            Throwable status = ((Result) response).getException();
            assertTrue(status instanceof StatusRpcException, String.valueOf(response));
            assertEquals(TriRpcStatus.Code.CANCELLED, ((StatusRpcException) status).getStatus().code);
            assertEquals(RpcException.UNKNOWN_EXCEPTION, ((StatusRpcException) status).getCode());
            // Reported in the cancelling thread, long before the provider's answer.
            assertCounted("right after cancel " + id, consumer.counters(), 0, 0, 0, i + 1);
        }
        awaitAnswered(ids);
        Thread.sleep(100);
        assertCounted("cancels, after the late answers", consumer.awaitNoneInFlight(), 0, 0, 0, CALLS);
    }

    @Test
    void cancellingACompletableFutureMethodsFutureLeavesTheCallToItsAnswer() throws Exception {
        // As over the dubbo protocol: the caller's future derives from the call's, a cancel does
        // not reach back, and the provider's answer is reported when it arrives.
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), 10_000, false);
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < CALLS; i++) {
            String id = "derived-cancel-" + i;
            ids.add(id);
            CompletableFuture<String> future = consumer.service.laterFuture(id, 1500);
            assertTrue(future.cancel(true));
        }
        awaitAnswered(ids);
        assertCounted("derived futures cancelled", consumer.awaitNoneInFlight(), CALLS, 0, 0, 0);
    }

    @Test
    void cancellingTheCancellationContextLeavesAUnaryCallAlone() throws Exception {
        // Triple's client call only cancels the context when the call ends (TripleClientCall);
        // nothing listens to it for a unary call: the call goes on and is answered.
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), 10_000, true);
        List<String> ids = new ArrayList<>();
        List<CompletableFuture<Object>> calls = new ArrayList<>();
        for (int i = 0; i < CALLS; i++) {
            String id = "context-cancel-" + i;
            ids.add(id);
            consumer.service.later(id, 1000);
            calls.add(RpcContext.getServiceContext().getCompletableFuture());
            RpcContext.getCancellationContext().cancel(new IllegalStateException("the user gave up"));
        }
        for (CompletableFuture<Object> call : calls) {
            assertTrue(List.of(NAMES).contains(call.get(20, TimeUnit.SECONDS)));
        }
        assertCounted("cancellation contexts cancelled", consumer.awaitNoneInFlight(), CALLS, 0, 0, 0);
    }

    @Test
    void eachStatusAProviderAnswersWithIsReportedAsTheTableSays() throws Exception {
        // A protobuf-typed method is sent unwrapped (GrpcHttp2ServerTransportListener.needWrap is
        // false), so the status the provider throws becomes the call's grpc-status
        // (CompositeExceptionHandler.resolveGrpcStatus), and the consumer's
        // UnaryClientCallListener completes the call normally with it as a StatusRpcException.
        // An error of the service's own (NOT_FOUND, ...) is the provider's answer: a success.
        Consumer consumer = new Consumer(PROVIDERS.directUrls(), 10_000, false);
        Map<String, Outcome> reported = new LinkedHashMap<>();
        Map<String, Outcome> expected = new LinkedHashMap<>();
        for (Map.Entry<TriRpcStatus.Code, Outcome> row : TripleStatusesTest.OUTCOMES.entrySet()) {
            TriRpcStatus.Code code = row.getKey();
            if (code == TriRpcStatus.Code.OK) {
                continue; // an answer, not a status the provider can throw
            }
            ServiceCounters before = consumer.counters();
            RpcException e = assertThrows(RpcException.class,
                    () -> consumer.service.answerStatus(Int32Value.of(code.code)));
            assertEquals(code, statusOf(e), describe(e));
            reported.put(code.name(), consumer.awaitNoneInFlight().outcomeSince(before));
            // A CANCELLED the provider sends is no cancel of the consumer's: the provider did not
            // serve (where Dubbo marks the response: TripleStatusesTest.CANCELLED_UNDER_A_UNARY_CALL).
            expected.put(code.name(), code == TriRpcStatus.Code.CANCELLED
                    ? TripleStatusesTest.CANCELLED_UNDER_A_UNARY_CALL : row.getValue());
        }
        // A provider's uncaught exception reaches the consumer as UNKNOWN: a failure.
        ServiceCounters before = consumer.counters();
        RpcException e = assertThrows(RpcException.class, () -> consumer.service.answerStatus(Int32Value.of(-1)));
        assertEquals(TriRpcStatus.Code.UNKNOWN, statusOf(e), describe(e));
        reported.put("uncaught exception", consumer.awaitNoneInFlight().outcomeSince(before));
        expected.put("uncaught exception", Outcome.FAILURE);
        System.out.println("statuses answered by the provider: " + reported);
        assertEquals(expected, reported);
    }

    /** The gRPC status a caller's exception carries (Triple's StatusRpcException in its causes). */
    private static TriRpcStatus.Code statusOf(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (c instanceof StatusRpcException) {
                return ((StatusRpcException) c).getStatus().code;
            }
        }
        return null;
    }

    @Test
    void aProviderThatRefusesTheCallIsAFailure() throws Exception {
        // Reachable Triple servers that do not serve the service: they answer with an error status.
        String urls = OTHER_SERVICE.directUrls().replace(EchoService.class.getName(), OutcomeService.class.getName());
        Consumer consumer = new Consumer(urls, 10_000, false);
        for (int i = 0; i < CALLS; i++) {
            String id = "refused-call-" + i;
            RpcException e = assertThrows(RpcException.class, () -> consumer.service.later(id, 0));
            System.out.println("refused call seen by the caller: " + describe(e));
        }
        assertCounted("refused calls", consumer.awaitNoneInFlight(), 0, CALLS, 0, 0);
    }

    @Test
    void aRefusedConnectionIsAFailure() throws Exception {
        // Nothing listens: TripleInvoker fails the call at once with UNAVAILABLE (its future
        // completes exceptionally). Afterwards Dubbo sets both providers aside for reconnection
        // and fails further calls before any pick, so one call is all polylb gets to see.
        String path = "/" + OutcomeService.class.getName();
        String urls = "tri://127.0.0.1:" + InJvmProviders.freeLoopbackPort() + path
                + ";tri://127.0.0.1:" + InJvmProviders.freeLoopbackPort() + path;
        Consumer consumer = new Consumer(urls, 10_000, false, false);
        RpcException e = assertThrows(RpcException.class, () -> consumer.service.later("refused-connection", 0));
        System.out.println("refused connection seen by the caller: " + describe(e));
        ServiceCounters c = consumer.awaitNoneInFlight();
        System.out.println("refused connection: " + c);
        // The cluster's reselect of an unavailable pick is released as never sent (a
        // cancel); the one attempt sent is the failure.
        assertEquals(List.of(0, 1, 0), List.of(c.succeeded, c.failures, c.timeouts), c.toString());
    }
}
