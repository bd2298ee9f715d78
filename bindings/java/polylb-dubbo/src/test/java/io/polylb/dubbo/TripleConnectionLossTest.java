package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Int32Value;
import io.polylb.Outcome;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What polylb records for a Triple call whose connection to the provider goes away under it: a
 * {@link TcpRelay} stands between a real consumer and real providers in this JVM, and is killed
 * (a TCP reset, or an orderly close) while a slow unary call or a held server stream is in
 * flight. Triple ends such a call with the status CANCELLED (TripleClientCall.onClose:
 * onCancelByRemote(CANCELLED)), the code a user's own cancel gets too; the provider could not
 * serve, so it is a failure (docs/outcomes.md: a connection reset is a FAILURE), and nothing may
 * stay in flight. A user's cancel stays a cancel (TripleOutcomesTest, TripleStreamsTest): Triple
 * completes it without its call listener, and tells a stream's observer nothing of it.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TripleConnectionLossTest {
    static final String LB = "polylb-leastactive";
    static final String[] NAMES = {"A", "B"};
    /** The callIds of the unary calls the providers started serving. */
    static final Set<String> STARTED = ConcurrentHashMap.newKeySet();
    /** Far longer than a case takes: the calls end by the relay's kill, not by an answer. */
    static final int SLOW_MS = 30_000;

    /** Answers {@code later} after its delay, recording in {@link #STARTED} when it starts. */
    public static class UnaryProvider extends SleepingLater implements OutcomeService {
        UnaryProvider(String name) {
            super(name);
        }

        @Override
        public String later(String callId, int delayMs) {
            STARTED.add(callId);
            return super.later(callId, delayMs);
        }

        @Override
        public String fail(String callId) {
            throw new IllegalArgumentException("business exception of " + callId);
        }

        @Override
        public Int32Value answerStatus(Int32Value code) {
            return code;
        }
    }

    @RegisterExtension
    static final InJvmProviders<OutcomeService> UNARY =
            new InJvmProviders<>("tri", OutcomeService.class, "tri-loss-provider-", NAMES, UnaryProvider::new);

    @RegisterExtension
    static final InJvmProviders<StreamService> STREAMS =
            new InJvmProviders<>("tri", StreamService.class, "tri-loss-stream-provider-", NAMES, TripleStreamsTest.Provider::new);

    static final List<DirectConsumer<?>> CONSUMERS = new ArrayList<>();
    static final List<TcpRelay> RELAYS = new ArrayList<>();

    /** Consumers stay open until every case ran (see TripleOutcomesTest.closeConsumers: why). */
    @AfterAll
    static void closeConsumers() {
        for (TcpRelay relay : RELAYS) {
            relay.close();
        }
        RELAYS.clear();
        DirectConsumer.closeAll(CONSUMERS);
    }

    /**
     * A relay in front of each provider of {@code directUrls}; returns the consumer's URLs to the
     * relays.
     */
    private static String relayed(String directUrls, List<TcpRelay> relays) throws Exception {
        List<String> urls = new ArrayList<>();
        for (String url : directUrls.split(";")) {
            int colon = url.indexOf(':', "tri://".length());
            int slash = url.indexOf('/', colon);
            TcpRelay relay = new TcpRelay(Integer.parseInt(url.substring(colon + 1, slash)));
            relays.add(relay);
            RELAYS.add(relay);
            urls.add(url.substring(0, colon + 1) + relay.port() + url.substring(slash));
        }
        return String.join(";", urls);
    }

    private static void killAll(List<TcpRelay> relays, boolean reset) {
        for (TcpRelay relay : relays) {
            relay.kill(reset);
        }
    }

    private static <T> DirectConsumer<T> consumer(Class<T> service, String urls, boolean async) throws Exception {
        DirectConsumer<T> consumer = new DirectConsumer<>("tri-loss-consumer", service, urls, LB, 0, 60_000, async);
        CONSUMERS.add(consumer);
        consumer.awaitConnected();
        return consumer;
    }

    private static void await(String what, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!condition.getAsBoolean() && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertTrue(condition.getAsBoolean(), what);
    }

    /** The gRPC status code in {@code t}'s causes (null if none). */
    private static TriRpcStatus.Code statusOf(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (c instanceof StatusRpcException) {
                return ((StatusRpcException) c).getStatus().code;
            }
        }
        return null;
    }

    private static String describe(Throwable t) {
        StringBuilder s = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            s.append(s.length() == 0 ? "" : " <- ").append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        return s.toString();
    }

    /**
     * A slow unary call in flight when the connection to its provider goes away: Triple completes
     * it with CANCELLED through its call listener, and polylb reports a failure (a cancel on a Dubbo
     * before 3.2, whose listener does not mark its response: {@link
     * TripleStatusesTest#CANCELLED_UNDER_A_UNARY_CALL}).
     */
    private static void unaryCallLosingItsConnection(boolean reset) throws Exception {
        List<TcpRelay> relays = new ArrayList<>();
        DirectConsumer<OutcomeService> consumer = consumer(OutcomeService.class, relayed(UNARY.directUrls(), relays), true);
        String id = "unary-" + (reset ? "reset" : "closed");
        consumer.reference.get().later(id, SLOW_MS); // async: returns null at once
        CompletableFuture<Object> call = RpcContext.getServiceContext().getCompletableFuture();
        await("the provider never got " + id, () -> STARTED.contains(id));
        ServiceCounters before = consumer.counters();
        assertEquals(1, before.active, "in flight: " + before);
        killAll(relays, reset);
        ExecutionException e = assertThrows(ExecutionException.class, () -> call.get(20, TimeUnit.SECONDS));
        System.out.println("unary call, connection " + (reset ? "reset" : "closed") + ": " + describe(e));
        assertEquals(TriRpcStatus.Code.CANCELLED, statusOf(e), describe(e));
        ServiceCounters after = consumer.awaitNoneInFlight();
        System.out.println("unary call, connection " + (reset ? "reset" : "closed") + ": " + after);
        assertEquals(TripleStatusesTest.CANCELLED_UNDER_A_UNARY_CALL, after.outcomeSince(before), after.toString());
    }

    @Test
    void aUnaryCallWhoseConnectionIsResetIsAFailure() throws Exception {
        unaryCallLosingItsConnection(true);
    }

    @Test
    void aUnaryCallWhoseConnectionClosesIsAFailure() throws Exception {
        unaryCallLosingItsConnection(false);
    }

    /**
     * A held server stream open when the connection to its provider goes away: Triple tells the
     * response observer onError(CANCELLED), and polylb reports a failure.
     */
    private static void streamLosingItsConnection(boolean reset) throws Exception {
        List<TcpRelay> relays = new ArrayList<>();
        DirectConsumer<StreamService> consumer = consumer(StreamService.class, relayed(STREAMS.directUrls(), relays), false);
        String id = "stream-" + (reset ? "reset" : "closed");
        TripleStreamsTest.Received received = new TripleStreamsTest.Received();
        consumer.reference.get().held(id, received);
        assertNotNull(received.messages.poll(20, TimeUnit.SECONDS), "no message on the stream");
        await("the provider never got " + id, () -> TripleStreamsTest.OPEN_STREAMS.containsKey(id));
        ServiceCounters before = consumer.counters();
        assertEquals(1, before.active, "in flight: " + before);
        killAll(relays, reset);
        Throwable end = received.end.get(20, TimeUnit.SECONDS);
        assertNotNull(end, "the stream completed");
        System.out.println("stream, connection " + (reset ? "reset" : "closed") + ": " + describe(end));
        assertEquals(TriRpcStatus.Code.CANCELLED, statusOf(end), describe(end));
        ServiceCounters after = consumer.awaitNoneInFlight();
        System.out.println("stream, connection " + (reset ? "reset" : "closed") + ": " + after);
        assertEquals(Outcome.FAILURE, after.outcomeSince(before), after.toString());
    }

    @Test
    void aServerStreamWhoseConnectionIsResetIsAFailure() throws Exception {
        streamLosingItsConnection(true);
    }

    @Test
    void aServerStreamWhoseConnectionClosesIsAFailure() throws Exception {
        streamLosingItsConnection(false);
    }
}
