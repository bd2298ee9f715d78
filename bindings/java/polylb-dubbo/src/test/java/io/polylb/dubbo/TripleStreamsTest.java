package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.Outcome;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.stream.StreamObserver;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;
import org.apache.dubbo.rpc.protocol.tri.CancelableStreamObserver;
import org.apache.dubbo.rpc.protocol.tri.ClientStreamObserver;
import org.apache.dubbo.rpc.protocol.tri.observer.ClientCallToObserverAdapter;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What polylb records for Triple's streaming calls, between a real consumer and real providers in
 * this JVM. Triple completes a stream call's result as the stream opens; {@link
 * PolylbInvokerFilter} must keep the call in flight until the stream ends and then report it by
 * the status it ended with, its latency the stream's life.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TripleStreamsTest {
    static final String LB = "polylb-leastactive";
    static final String[] NAMES = {"A", "B"};
    /** The provider's side of each held stream, by callId, for the test to end. */
    static final Map<String, StreamObserver<String>> OPEN_STREAMS = new ConcurrentHashMap<>();

    public static final class Provider implements StreamService {
        private final String name;

        Provider(String name) {
            this.name = name;
        }

        @Override
        public void held(String callId, StreamObserver<String> messages) {
            OPEN_STREAMS.put(callId, messages);
            messages.onNext(name);
        }

        @Override
        public StreamObserver<String> echo(StreamObserver<String> replies) {
            return new StreamObserver<>() {
                @Override
                public void onNext(String message) {
                    replies.onNext(name);
                }

                @Override
                public void onError(Throwable t) {}

                @Override
                public void onCompleted() {
                    replies.onCompleted();
                }
            };
        }
    }

    @RegisterExtension
    static final InJvmProviders<StreamService> PROVIDERS =
            new InJvmProviders<>("tri", StreamService.class, "tri-stream-provider-", NAMES, Provider::new);

    static final List<DirectConsumer<StreamService>> CONSUMERS = new ArrayList<>();

    /** Consumers stay open until every case ran (see TripleOutcomesTest.closeConsumers: why). */
    @AfterAll
    static void closeConsumers() {
        DirectConsumer.closeAll(CONSUMERS);
    }

    /** A connected consumer in its own FrameworkModel (fresh polylb stats). */
    static DirectConsumer<StreamService> consumer(String urls, boolean awaitConnected) throws InterruptedException {
        DirectConsumer<StreamService> consumer =
                new DirectConsumer<>("tri-stream-consumer", StreamService.class, urls, LB, 0, 10_000, false);
        CONSUMERS.add(consumer);
        if (awaitConnected) {
            consumer.awaitConnected();
        }
        return consumer;
    }

    /** A consumer's side of a stream: its messages, and how it ended (null: completed). */
    static class Received implements StreamObserver<String> {
        final BlockingQueue<String> messages = new LinkedBlockingQueue<>();
        final CompletableFuture<Throwable> end = new CompletableFuture<>();

        @Override
        public void onNext(String message) {
            messages.add(message);
        }

        @Override
        public void onError(Throwable t) {
            end.complete(t);
        }

        @Override
        public void onCompleted() {
            end.complete(null);
        }

        String next() throws InterruptedException {
            String message = messages.poll(20, TimeUnit.SECONDS);
            assertNotNull(message, "no message on the stream");
            return message;
        }

        Throwable awaitEnd() throws Exception {
            return end.get(20, TimeUnit.SECONDS);
        }
    }

    /** A held stream's provider side, once the provider got the call. */
    private static StreamObserver<String> providerSide(String callId) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!OPEN_STREAMS.containsKey(callId) && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        StreamObserver<String> side = OPEN_STREAMS.remove(callId);
        assertNotNull(side, "the provider never got " + callId);
        return side;
    }

    /** Asserts what polylb recorded: {succeeded, failures, timeouts, cancelled, in flight}. */
    private static void assertCounted(String what, ServiceCounters c, int succeeded, int failures, int timeouts,
            int cancelled, int active) {
        System.out.println(what + ": " + c);
        assertEquals(List.of(succeeded, failures, timeouts, cancelled, active),
                List.of(c.succeeded, c.failures, c.timeouts, c.cancelled(), c.active),
                what + ": [succeeded, failures (timeouts included), timeouts, cancelled, in flight] were " + c);
    }

    @Test
    void aServerStreamIsInFlightUntilItCompletesAndItsLatencyIsItsLife() throws Exception {
        DirectConsumer<StreamService> consumer = consumer(PROVIDERS.directUrls(), true);
        Received received = new Received();
        long opened = System.nanoTime();
        consumer.reference.get().held("life", received);
        assertTrue(List.of(NAMES).contains(received.next()));
        StreamObserver<String> provider = providerSide("life");
        Thread.sleep(300);
        assertCounted("stream open", consumer.counters(), 0, 0, 0, 0, 1);
        provider.onCompleted();
        assertEquals(null, received.awaitEnd());
        long lifeUs = (System.nanoTime() - opened) / 1000;
        ServiceCounters c = consumer.awaitNoneInFlight();
        assertCounted("stream completed", c, 1, 0, 0, 0, 0);
        // Reported as it opened, the latency would be the few ms of opening it.
        assertTrue(c.successUs >= 300_000 && c.successUs <= lifeUs,
                "latency " + c.successUs + " us, the stream lived 300 ms to " + lifeUs + " us");
    }

    @Test
    void eachStatusAStreamEndsWithIsReportedAsTheTableSays() throws Exception {
        DirectConsumer<StreamService> consumer = consumer(PROVIDERS.directUrls(), true);
        Map<String, Outcome> reported = new LinkedHashMap<>();
        Map<String, Outcome> expected = new LinkedHashMap<>();
        for (Map.Entry<TriRpcStatus.Code, Outcome> row : TripleStatusesTest.OUTCOMES.entrySet()) {
            TriRpcStatus.Code code = row.getKey();
            String callId = "status-" + code.name();
            ServiceCounters before = consumer.counters();
            Received received = new Received();
            consumer.reference.get().held(callId, received);
            received.next();
            StreamObserver<String> provider = providerSide(callId);
            if (code == TriRpcStatus.Code.OK) {
                provider.onCompleted();
            } else {
                provider.onError(TriRpcStatus.fromCode(code).withDescription("ended by the provider").asException());
            }
            Throwable end = received.awaitEnd();
            TriRpcStatus.Code seen = end == null ? TriRpcStatus.Code.OK : ((StatusRpcException) end).getStatus().code;
            assertEquals(code, seen, "the status the consumer saw");
            reported.put(code.name(), consumer.awaitNoneInFlight().outcomeSince(before));
            // A CANCELLED the provider ends the stream with is no cancel of the consumer's (which
            // Triple tells the observer nothing of): the provider did not serve, a failure.
            expected.put(code.name(), code == TriRpcStatus.Code.CANCELLED ? Outcome.FAILURE : row.getValue());
        }
        System.out.println("statuses streams ended with: " + reported);
        assertEquals(expected, reported);
    }

    @Test
    void aCancelThroughTheUsersCancelableObserverIsACancel() throws Exception {
        DirectConsumer<StreamService> consumer = consumer(PROVIDERS.directUrls(), true);
        CompletableFuture<String> first = new CompletableFuture<>();
        CompletableFuture<Throwable> end = new CompletableFuture<>();
        List<ClientCallToObserverAdapter<String>> started = new ArrayList<>();
        CancelableStreamObserver<String> observer = new CancelableStreamObserver<String>() {
            // Not marked @Override: Dubbo 3.0's CancelableStreamObserver lacks it, and
            // bindings/java/run-compat.sh compiles this test against 3.0 too (hence no <>).
            public void beforeStart(ClientCallToObserverAdapter<String> call) {
                started.add(call);
            }

            @Override
            public void onNext(String message) {
                first.complete(message);
            }

            @Override
            public void onError(Throwable t) {
                end.complete(t);
            }

            @Override
            public void onCompleted() {
                end.complete(null);
            }
        };
        consumer.reference.get().held("cancelled", observer);
        assertTrue(List.of(NAMES).contains(first.get(20, TimeUnit.SECONDS)));
        providerSide("cancelled");
        // Triple still hands the user's observer its flow control and its cancellation context.
        assertEquals(1, started.size(), "beforeStart calls");
        // Read reflectively for the same reason (3.0 has no getCancellationContext).
        assertNotNull(CancelableStreamObserver.class.getMethod("getCancellationContext").invoke(observer));
        assertCounted("stream open", consumer.counters(), 0, 0, 0, 0, 1);
        // Triple cancels the call and tells the observer nothing (TripleClientCall.cancelByLocal).
        observer.cancel(new IllegalStateException("the user gave up"));
        assertCounted("stream cancelled", consumer.awaitNoneInFlight(), 0, 0, 0, 1, 0);
        assertFalse(end.isDone(), "Triple told the observer of its own cancel: " + end);
    }

    @Test
    void aBiStreamTheConsumerAbortsIsACancel() throws Exception {
        DirectConsumer<StreamService> consumer = consumer(PROVIDERS.directUrls(), true);
        for (boolean byCancel : new boolean[] {false, true}) {
            ServiceCounters before = consumer.counters();
            Received received = new Received();
            StreamObserver<String> requests = consumer.reference.get().echo(received);
            // Still Triple's kind of observer: flow control and cancel stay reachable.
            assertTrue(requests instanceof ClientStreamObserver && requests instanceof CancelableStreamObserver,
                    requests.getClass().getName());
            requests.onNext("one");
            received.next();
            assertEquals(1, consumer.counters().active, "in flight while open");
            if (byCancel) {
                ((CancelableStreamObserver<String>) requests).cancel(new IllegalStateException("the user gave up"));
            } else {
                requests.onError(new IllegalStateException("the user gave up"));
            }
            assertEquals(Outcome.CANCELLED, consumer.awaitNoneInFlight().outcomeSince(before),
                    byCancel ? "cancel" : "onError");
        }
    }

    @Test
    void aBiStreamIsInFlightUntilItCompletes() throws Exception {
        DirectConsumer<StreamService> consumer = consumer(PROVIDERS.directUrls(), true);
        Received received = new Received();
        StreamObserver<String> requests = consumer.reference.get().echo(received);
        requests.onNext("one");
        requests.onNext("two");
        String provider = received.next();
        assertEquals(provider, received.next(), "one stream, one provider");
        assertCounted("bi stream open", consumer.counters(), 0, 0, 0, 0, 1);
        requests.onCompleted();
        assertEquals(null, received.awaitEnd());
        assertCounted("bi stream completed", consumer.awaitNoneInFlight(), 1, 0, 0, 0, 0);
    }

    @Test
    void aStreamToAProviderThatIsNotThereIsOneFailure() throws Exception {
        // Nothing listens: the stream fails as it opens, seen both by its result and, possibly,
        // by its observer; the attempt is reported once.
        String path = "/" + StreamService.class.getName();
        String urls = "tri://127.0.0.1:" + InJvmProviders.freeLoopbackPort() + path
                + ";tri://127.0.0.1:" + InJvmProviders.freeLoopbackPort() + path;
        DirectConsumer<StreamService> consumer = consumer(urls, false);
        RpcException e = assertThrows(RpcException.class, () -> consumer.reference.get().held("nobody", new Received()));
        System.out.println("stream to nobody threw " + e);
        ServiceCounters c = consumer.awaitNoneInFlight();
        System.out.println("stream to nobody: " + c);
        // As for a unary call (TripleOutcomesTest): the cluster's reselect of an unavailable
        // pick is released as never sent (a cancel); the one attempt sent is the failure.
        assertEquals(List.of(0, 1, 0), List.of(c.succeeded, c.failures, c.timeouts), c.toString());
    }

    @Test
    void theObserverIsFoundWhereTripleReadsItAndWrappedOncePerAttempt() {
        URL tri = URL.valueOf("tri://127.0.0.1:50051/" + StreamService.class.getName());
        URL dubbo = URL.valueOf("dubbo://127.0.0.1:20880/" + StreamService.class.getName());
        Received observer = new Received();
        assertEquals(1, TripleStreams.responseObserverIndex(invocation("request", observer), tri));
        assertEquals(0, TripleStreams.responseObserverIndex(invocation(observer), tri));
        assertEquals(-1, TripleStreams.responseObserverIndex(invocation(observer), dubbo));
        assertEquals(-1, TripleStreams.responseObserverIndex(invocation("request"), tri));
        assertEquals(-1, TripleStreams.responseObserverIndex(invocation("a", "b", observer), tri));
        assertEquals(-1, TripleStreams.responseObserverIndex(invocation(observer, observer), tri));

        RpcInvocation retried = invocation("request", observer);
        List<Throwable> ends = new ArrayList<>();
        TripleStreams.End first = TripleStreams.watch(retried, 1, ends::add);
        assertTrue(first.claim(), "the first attempt failed as it opened");
        TripleStreams.End second = TripleStreams.watch(retried, 1, ends::add);
        TripleStreams.Wrapper wrapper = (TripleStreams.Wrapper) retried.getArguments()[1];
        assertSame(observer, wrapper.delegate(), "the retry wraps the user's observer");
        ((StreamObserver<?>) wrapper).onCompleted();
        ((StreamObserver<?>) wrapper).onError(new IllegalStateException("after the end"));
        assertEquals(1, ends.size(), "the stream's end is reported once");
        assertEquals(null, ends.get(0));
        assertFalse(second.claim(), "the end claimed the attempt");
        assertEquals(null, observer.end.getNow(new IllegalStateException("not ended")), "the user heard the end");
    }

    @Test
    void aPlainObserverIsWatchedWithoutTriplesClasses() throws Exception {
        // Modular Dubbo without dubbo-rpc-triple: the stream helpers load, link and wrap a plain
        // observer; only a CancelableStreamObserver (Triple's own class) needs Triple's wrappers.
        ClassLoader loader = new TripleStatusesTest.WithoutTriple(getClass().getClassLoader(), TripleStreams.class,
                ForwardingCancelableObserver.class, CancelableStreamEnd.class, RequestStreamEnd.class);
        assertThrows(ClassNotFoundException.class, () -> loader.loadClass(CancelableStreamObserver.class.getName()));
        Class<?> streams = loader.loadClass(TripleStreams.class.getName());
        Method index = streams.getDeclaredMethod("responseObserverIndex", Invocation.class, URL.class);
        Method watch = streams.getDeclaredMethod("watch", Invocation.class, int.class, Consumer.class);
        index.setAccessible(true);
        watch.setAccessible(true);
        Received observer = new Received();
        RpcInvocation call = invocation("request", observer);
        assertEquals(1, index.invoke(null, call, URL.valueOf("tri://127.0.0.1:50051/s")));
        List<Throwable> ends = new ArrayList<>();
        watch.invoke(null, call, 1, (Consumer<Throwable>) ends::add);
        Object wrapper = call.getArguments()[1];
        assertEquals(loader, wrapper.getClass().getClassLoader());
        ((StreamObserver<?>) wrapper).onCompleted();
        assertEquals(Collections.singletonList(null), ends);
        assertEquals(null, observer.end.getNow(new IllegalStateException("not ended")), "the user heard the end");
    }

    private static RpcInvocation invocation(Object... arguments) {
        RpcInvocation invocation = new RpcInvocation();
        invocation.setMethodName("held");
        invocation.setArguments(arguments);
        return invocation;
    }
}
