package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.Outcome;
import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletionException;
import java.util.stream.Collectors;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.Version;
import org.apache.dubbo.common.serialize.SerializationException;
import org.apache.dubbo.remoting.RemotingException;
import org.apache.dubbo.remoting.transport.ExceedPayloadLimitException;
import org.apache.dubbo.rpc.AppResponse;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;
import org.junit.jupiter.api.Test;

/** How Triple's statuses are told apart (TripleOutcomesTest runs them end to end). */
class TripleStatusesTest {
    static final URL TRI = URL.valueOf("tri://127.0.0.1:50051/com.example.DemoService");
    static final URL DUBBO = URL.valueOf("dubbo://127.0.0.1:20880/com.example.DemoService");

    /**
     * The attribute Triple's UnaryClientCallListener sets on the response it builds from the
     * call's end (org.apache.dubbo.remoting.Constants.CONTENT_LENGTH_KEY, which Dubbo 3.0 and 3.1
     * lack: spelled out so that this test compiles against them).
     */
    static final String CONTENT_LENGTH = "content-length";

    /**
     * Whether this Dubbo's UnaryClientCallListener marks its responses (3.2 and later): only then
     * can a unary call's CANCELLED that came from the call's end be told from a user's cancel.
     */
    static final boolean LISTENER_MARKS_ITS_RESPONSES = isAtLeast(Version.getVersion(), 3, 2);

    /**
     * The outcome of a unary Triple call the provider ended with CANCELLED (its own status, a
     * closed connection, a reset stream): a failure where Dubbo marks such a response, else a
     * cancel, as a user's cancel.
     */
    static final Outcome CANCELLED_UNDER_A_UNARY_CALL = LISTENER_MARKS_ITS_RESPONSES ? Outcome.FAILURE : Outcome.CANCELLED;

    static boolean isAtLeast(String version, int major, int minor) {
        String[] parts = version == null ? new String[0] : version.split("[.-]");
        try {
            int ma = Integer.parseInt(parts[0]);
            int mi = Integer.parseInt(parts[1]);
            return ma > major || (ma == major && mi >= minor);
        } catch (RuntimeException e) {
            return true; // an unreadable version: the one the adapter is built for
        }
    }

    /**
     * The outcome of a Triple call whose response carries each gRPC status, as docs/outcomes.md
     * says: an error of the service's own is the provider's answer. CANCELLED is the consumer's
     * own cancel (see {@link #aCancelledStatusIsACancelOnlyWhenTheConsumerCancelled} for one the
     * call's end brought).
     */
    static final Map<TriRpcStatus.Code, Outcome> OUTCOMES = outcomes();

    private static Map<TriRpcStatus.Code, Outcome> outcomes() {
        Map<TriRpcStatus.Code, Outcome> m = new EnumMap<>(TriRpcStatus.Code.class);
        m.put(TriRpcStatus.Code.OK, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.CANCELLED, Outcome.CANCELLED);
        m.put(TriRpcStatus.Code.UNKNOWN, Outcome.FAILURE);
        m.put(TriRpcStatus.Code.INVALID_ARGUMENT, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.DEADLINE_EXCEEDED, Outcome.TIMEOUT);
        m.put(TriRpcStatus.Code.NOT_FOUND, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.ALREADY_EXISTS, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.PERMISSION_DENIED, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.RESOURCE_EXHAUSTED, Outcome.FAILURE);
        m.put(TriRpcStatus.Code.FAILED_PRECONDITION, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.ABORTED, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.OUT_OF_RANGE, Outcome.SUCCESS);
        m.put(TriRpcStatus.Code.UNIMPLEMENTED, Outcome.FAILURE);
        m.put(TriRpcStatus.Code.INTERNAL, Outcome.FAILURE);
        m.put(TriRpcStatus.Code.UNAVAILABLE, Outcome.FAILURE);
        m.put(TriRpcStatus.Code.DATA_LOSS, Outcome.FAILURE);
        m.put(TriRpcStatus.Code.UNAUTHENTICATED, Outcome.SUCCESS);
        return m;
    }

    @Test
    void eachStatusHasTheOutcomeOfTheTable() {
        assertEquals(17, TriRpcStatus.Code.values().length, "gRPC has 17 codes");
        assertEquals(TriRpcStatus.Code.values().length, OUTCOMES.size(), "a row for each code");
        Map<TriRpcStatus.Code, Outcome> overTriple = new EnumMap<>(TriRpcStatus.Code.class);
        Map<TriRpcStatus.Code, Outcome> overDubbo = new EnumMap<>(TriRpcStatus.Code.class);
        for (TriRpcStatus.Code code : TriRpcStatus.Code.values()) {
            StatusRpcException status = TriRpcStatus.fromCode(code).withDescription("status").asException();
            overTriple.put(code, PolylbInvokerFilter.outcomeOf(status, TRI));
            assertEquals(OUTCOMES.get(code), PolylbInvokerFilter.outcomeOf(status, TRI.setProtocol("grpc")), code.name());
            // Over the dubbo protocol such an exception is what the provider threw: its answer.
            overDubbo.put(code, PolylbInvokerFilter.outcomeOf(status, DUBBO));
        }
        assertEquals(OUTCOMES, overTriple);
        for (Outcome outcome : overDubbo.values()) {
            assertEquals(Outcome.SUCCESS, outcome, overDubbo.toString());
        }
    }

    @Test
    void statusesAreToldApart() {
        StatusRpcException cancelled = TriRpcStatus.CANCELLED.asException();
        StatusRpcException deadline = TriRpcStatus.DEADLINE_EXCEEDED.withDescription("late").asException();
        StatusRpcException unavailable = TriRpcStatus.UNAVAILABLE.asException();
        // Dubbo gives CANCELLED the generic code: only the status says it is a cancel.
        assertEquals(RpcException.UNKNOWN_EXCEPTION, cancelled.getCode());
        assertTrue(PolylbInvokerFilter.isCancellation(cancelled));
        assertTrue(PolylbInvokerFilter.isCancellation(new CompletionException(cancelled)));
        assertFalse(PolylbInvokerFilter.isTimeout(cancelled));
        assertTrue(deadline.isTimeout());
        assertTrue(PolylbInvokerFilter.isTimeout(deadline));
        assertFalse(PolylbInvokerFilter.isCancellation(deadline));
        assertFalse(PolylbInvokerFilter.isCancellation(unavailable));
        assertFalse(PolylbInvokerFilter.isTimeout(unavailable));
    }

    /** A response as Triple's UnaryClientCallListener builds it from the call's end. */
    static AppResponse fromTheCallsEnd(TriRpcStatus status) {
        AppResponse response = new AppResponse();
        response.setException(status.asException());
        response.setAttribute(CONTENT_LENGTH, 0);
        return response;
    }

    @Test
    void aCancelledStatusIsACancelOnlyWhenTheConsumerCancelled() {
        // DeadlineFuture.cancel, the user's cancel of the call's own future: no mark.
        AppResponse userCancel = new AppResponse();
        userCancel.setException(TriRpcStatus.CANCELLED.asException());
        assertEquals(Outcome.CANCELLED, PolylbInvokerFilter.outcomeOf(userCancel, TRI));
        assertFalse(TripleStatuses.isCancelledUnderTheCall(userCancel));
        // Through UnaryClientCallListener: the connection closed (no description), the server
        // reset the stream, or the provider sent CANCELLED itself.
        for (TriRpcStatus status : List.of(TriRpcStatus.CANCELLED,
                TriRpcStatus.CANCELLED.withDescription("Canceled by remote peer, errorCode=8"),
                TriRpcStatus.CANCELLED.withDescription("answered by the provider"))) {
            AppResponse response = fromTheCallsEnd(status);
            assertTrue(TripleStatuses.isCancelledUnderTheCall(response));
            assertEquals(Outcome.FAILURE, PolylbInvokerFilter.outcomeOf(response, TRI), status.toString());
            assertEquals(Outcome.FAILURE, PolylbInvokerFilter.outcomeOf(response, TRI.setProtocol("grpc")));
            // Over the dubbo protocol such an exception is what the provider threw: its answer.
            assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.outcomeOf(response, DUBBO));
        }
        // Every other status keeps its outcome, mark or not.
        for (TriRpcStatus.Code code : TriRpcStatus.Code.values()) {
            if (code != TriRpcStatus.Code.CANCELLED && code != TriRpcStatus.Code.OK) {
                AppResponse response = fromTheCallsEnd(TriRpcStatus.fromCode(code));
                assertFalse(TripleStatuses.isCancelledUnderTheCall(response), code.name());
                assertEquals(OUTCOMES.get(code), PolylbInvokerFilter.outcomeOf(response, TRI), code.name());
            }
        }
        // "No time left" and a value are no status.
        AppResponse neverSent = new AppResponse();
        neverSent.setException(new RpcException(RpcException.TIMEOUT_TERMINATE, "No time left"));
        neverSent.setAttribute(CONTENT_LENGTH, 0);
        assertEquals(Outcome.CANCELLED, PolylbInvokerFilter.outcomeOf(neverSent, TRI));
        assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.outcomeOf(new AppResponse((Object) "value"), TRI));

        // A stream: Triple tells the response observer of an end from the provider's side only;
        // the consumer's cancel reaches the filter as a CancellationException.
        assertEquals(Outcome.FAILURE, PolylbInvokerFilter.streamOutcome(TriRpcStatus.CANCELLED.asException()));
        assertEquals(Outcome.FAILURE, PolylbInvokerFilter.streamOutcome(
                TriRpcStatus.CANCELLED.withDescription("Canceled by remote peer, errorCode=8").asException()));
        assertEquals(Outcome.CANCELLED, PolylbInvokerFilter.streamOutcome(new CancellationException("cancel")));
        assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.streamOutcome(null));
        assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.streamOutcome(TriRpcStatus.NOT_FOUND.asException()));
        assertEquals(Outcome.TIMEOUT, PolylbInvokerFilter.streamOutcome(TriRpcStatus.DEADLINE_EXCEEDED.asException()));
        assertEquals(Outcome.FAILURE, PolylbInvokerFilter.streamOutcome(TriRpcStatus.UNAVAILABLE.asException()));
    }

    @Test
    void onlyTriplesOwnStatusOfATripleCallIsAnError() {
        StatusRpcException status = TriRpcStatus.UNAVAILABLE.asException();
        assertTrue(TripleStatuses.isErrorStatus(status, TRI));
        assertTrue(TripleStatuses.isErrorStatus(status, TRI.setProtocol("grpc")));
        // Over the dubbo protocol it is what the provider threw: its answer.
        assertFalse(TripleStatuses.isErrorStatus(status, DUBBO));
        // An error of the service's own is the provider's answer.
        assertFalse(TripleStatuses.isErrorStatus(TriRpcStatus.NOT_FOUND.asException(), TRI));
        // A business exception comes back over Triple as itself.
        assertFalse(TripleStatuses.isErrorStatus(new IllegalArgumentException(), TRI));
        assertFalse(TripleStatuses.isErrorStatus(new RpcException(RpcException.TIMEOUT_EXCEPTION, "t"), TRI));
        assertFalse(TripleStatuses.isErrorStatus(null, TRI));
    }

    @Test
    void onlyTriplesOwnRefusalToSendIsARequestNeverSent() {
        IOException packing = new IOException("cannot serialize");
        StatusRpcException unpacked =
                TriRpcStatus.INTERNAL.withDescription("Serialize request failed").withCause(packing).asException();
        StatusRpcException aborted = TriRpcStatus.INTERNAL.withDescription("Call aborted cause client exception")
                .withCause(new NullPointerException()).asException();
        assertTrue(TripleStatuses.isUnsentRequest(unpacked));
        assertTrue(TripleStatuses.isUnsentRequest(aborted));
        // A sync call throws it in an RpcException around an ExecutionException.
        assertTrue(TripleStatuses.isUnsentRequest(new RpcException("sync",
                new java.util.concurrent.ExecutionException(unpacked))));
        assertEquals(Outcome.CANCELLED, PolylbInvokerFilter.outcomeOf(unpacked, TRI));
        assertEquals(Outcome.CANCELLED, PolylbInvokerFilter.outcomeOf(new AppResponse(aborted), TRI));
        // A status read from the wire has no cause, whatever its text: the provider's.
        assertFalse(TripleStatuses.isUnsentRequest(
                TriRpcStatus.INTERNAL.withDescription("Serialize request failed").asException()));
        // Triple's other INTERNALs: the transport, or an answer this side could not read.
        assertFalse(TripleStatuses.isUnsentRequest(
                TriRpcStatus.INTERNAL.withDescription("Http2 exception").withCause(packing).asException()));
        assertFalse(TripleStatuses.isUnsentRequest(
                TriRpcStatus.INTERNAL.withDescription("Deserialize response failed").withCause(packing).asException()));
        assertFalse(TripleStatuses.isUnsentRequest(TriRpcStatus.INTERNAL.withCause(packing).asException()));
        assertFalse(TripleStatuses.isUnsentRequest(
                TriRpcStatus.UNKNOWN.withDescription("Serialize request failed").withCause(packing).asException()));
        assertFalse(TripleStatuses.isUnsentRequest(packing));
        assertFalse(TripleStatuses.isUnsentRequest(null));
        // Over the dubbo protocol such a status in a response is what the provider threw: its answer.
        assertEquals(Outcome.SUCCESS, PolylbInvokerFilter.outcomeOf(unpacked, DUBBO));
    }

    @Test
    void onlyARequestTheDubboProtocolCouldNotEncodeIsNeverSent() {
        // DubboInvoker: the RemotingException of NettyChannel.send, around the codec's error.
        RemotingException unencodable = new RemotingException((java.net.InetSocketAddress) null, null,
                "Failed to send message", new IOException(new SerializationException("not Serializable")));
        assertEquals(Outcome.CANCELLED, PolylbInvokerFilter.errorOutcome(
                new RpcException(RpcException.SERIALIZATION_EXCEPTION, "send", unencodable)));
        RemotingException overLimit = new RemotingException((java.net.InetSocketAddress) null, null,
                "Failed to send message", new ExceedPayloadLimitException("Data length too large"));
        assertEquals(Outcome.CANCELLED, PolylbInvokerFilter.errorOutcome(
                new RpcException(RpcException.NETWORK_EXCEPTION, "send", overLimit)));
        // A send that failed on the connection is the provider's failure.
        RemotingException closed = new RemotingException((java.net.InetSocketAddress) null, null,
                "Failed to send message", new java.nio.channels.ClosedChannelException());
        assertEquals(Outcome.FAILURE, PolylbInvokerFilter.errorOutcome(
                new RpcException(RpcException.NETWORK_EXCEPTION, "send", closed)));
        // An error answered in the call's future (the provider's BAD_REQUEST, BAD_RESPONSE, its
        // answer over its payload limit): wrapped in an ExecutionException, the provider's.
        assertEquals(Outcome.FAILURE, PolylbInvokerFilter.errorOutcome(new RpcException(
                RpcException.SERIALIZATION_EXCEPTION, "answer", new java.util.concurrent.ExecutionException(
                        new SerializationException("Data length too large")))));
    }

    @Test
    void worksWithoutTriplesClasses() throws Exception {
        // Modular Dubbo ships StatusRpcException and TriRpcStatus in the optional
        // dubbo-rpc-triple: without them, TripleStatuses loads, links and answers "no".
        ClassLoader loader = new WithoutTriple(getClass().getClassLoader(), TripleStatuses.class);
        assertThrows(ClassNotFoundException.class, () -> loader.loadClass(StatusRpcException.class.getName()));
        Class<?> statuses = loader.loadClass(TripleStatuses.class.getName());
        assertEquals(loader, statuses.getClassLoader());
        Method isCancelled = statuses.getDeclaredMethod("isCancelled", Throwable.class);
        Method isErrorStatus = statuses.getDeclaredMethod("isErrorStatus", Throwable.class, URL.class);
        isCancelled.setAccessible(true);
        isErrorStatus.setAccessible(true);
        assertEquals(false, isCancelled.invoke(null, new RpcException("boom")));
        assertEquals(false, isErrorStatus.invoke(null, new RpcException("boom"), TRI));
        Method underTheCall = statuses.getDeclaredMethod("isCancelledUnderTheCall", org.apache.dubbo.rpc.Result.class);
        underTheCall.setAccessible(true);
        AppResponse response = new AppResponse();
        response.setException(new RpcException("boom"));
        response.setAttribute(CONTENT_LENGTH, 0);
        assertEquals(false, underTheCall.invoke(null, response));
    }

    /**
     * Loads the named classes of the adapter itself (with their nested classes), so that what
     * they refer to is resolved here; hides Triple's classes (its status, the protocol's
     * package), as modular Dubbo without dubbo-rpc-triple would; delegates the rest.
     */
    static final class WithoutTriple extends ClassLoader {
        private final List<String> own;

        WithoutTriple(ClassLoader parent, Class<?>... own) {
            super(parent);
            this.own = Arrays.stream(own).map(Class::getName).collect(Collectors.toList());
        }

        private boolean isOwn(String name) {
            return own.stream().anyMatch(o -> name.equals(o) || name.startsWith(o + "$"));
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            synchronized (getClassLoadingLock(name)) {
                if (name.startsWith(StatusRpcException.class.getName())
                        || name.startsWith(TriRpcStatus.class.getName())
                        || name.startsWith("org.apache.dubbo.rpc.protocol.tri.")) {
                    throw new ClassNotFoundException(name);
                }
                if (!isOwn(name)) {
                    return super.loadClass(name, resolve);
                }
                Class<?> c = findLoadedClass(name);
                if (c == null) {
                    String resource = name.replace('.', '/') + ".class";
                    try (InputStream in = getParent().getResourceAsStream(resource)) {
                        byte[] bytes = in.readAllBytes();
                        c = defineClass(name, bytes, 0, bytes.length);
                    } catch (IOException e) {
                        throw new ClassNotFoundException(name, e);
                    }
                }
                if (resolve) {
                    resolveClass(c);
                }
                return c;
            }
        }
    }
}
