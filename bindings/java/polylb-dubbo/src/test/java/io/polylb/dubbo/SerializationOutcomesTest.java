package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.polylb.Outcome;
import io.polylb.outside.Foreign;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.apache.dubbo.common.utils.SerializeSecurityManager;
import org.apache.dubbo.remoting.RemotingException;
import org.apache.dubbo.remoting.transport.ExceedPayloadLimitException;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What polylb records when a request or an answer cannot be serialized, between real Dubbo 3.3
 * consumers and providers in this JVM (dubbo protocol with hessian2, and Triple: wrapped hessian2
 * and protobuf; loopback only, direct URLs, no registry).
 *
 * <p>A request the consumer cannot encode (an argument that is not Serializable, or of a class
 * outside Dubbo's serialization allow list, STRICT from 3.3; over the dubbo protocol one over the
 * consumer's {@code payload} limit) is never sent: the provider's service code never sees it, and
 * docs/outcomes.md says CANCELLED, no verdict on the provider. Reported as failures (as they were),
 * one caller's bad argument counts against every provider a failover tries, and with outlier
 * ejection ejects healthy ones. A provider that cannot deserialize the request or serialize its
 * answer did get the call: its outcome is the provider's (see {@link PolylbInvokerFilter#isUnencodable}).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SerializationOutcomesTest {
    static final String LB = "polylb-leastactive";
    static final String[] NAMES = {"A", "B"};
    /** Over the dubbo protocol, the consumers' {@code payload} limit, bytes. */
    static final int PAYLOAD_LIMIT = 10_000;
    /** callId -> the class of the payload the provider's service code got. */
    static final Map<String, String> RECEIVED = new ConcurrentHashMap<>();
    /** The callIds whose service code ran. */
    static final Set<String> REACHED = ConcurrentHashMap.newKeySet();

    /** Not Serializable; named on no allow list unless a test adds it. */
    static final class NotSerializable {
        final int value = 1;
    }

    public static final class Provider implements PayloadService {
        private final String name;

        Provider(String name) {
            this.name = name;
        }

        @Override
        public String take(String callId, Object payload) {
            REACHED.add(callId);
            RECEIVED.put(callId, payload == null ? "null" : payload.getClass().getName());
            return name;
        }

        @Override
        public String takeUnreadable(String callId, Unreadable payload) {
            REACHED.add(callId);
            return name;
        }

        @Override
        public Object giveUnserializable(String callId) {
            REACHED.add(callId);
            return new NotSerializable();
        }
    }

    @RegisterExtension
    static final InJvmProviders<PayloadService> DUBBO =
            new InJvmProviders<>("dubbo", PayloadService.class, "ser-dubbo-provider-", NAMES, Provider::new);

    @RegisterExtension
    static final InJvmProviders<PayloadService> TRI =
            new InJvmProviders<>("tri", PayloadService.class, "ser-tri-provider-", NAMES, Provider::new);

    /** Triple providers of a protobuf-typed method (sent unwrapped). */
    @RegisterExtension
    static final InJvmProviders<OutcomeService> TRI_PROTOBUF = new InJvmProviders<>("tri", OutcomeService.class,
            "ser-tri-pb-provider-", NAMES, TripleOutcomesTest.Provider::new);

    static final List<DirectConsumer<?>> CONSUMERS = new ArrayList<>();

    /**
     * As in TripleOutcomesTest: closing a consumer's FrameworkModel closes every Triple server of
     * the JVM, so consumers stay open until every case ran.
     */
    @AfterAll
    static void closeConsumers() {
        DirectConsumer.closeAll(CONSUMERS);
    }

    /** A connected consumer of {@code urls} (failover without retries), kept for {@link #closeConsumers}. */
    static <T> DirectConsumer<T> consumer(Class<T> service, String urls, boolean async) throws InterruptedException {
        DirectConsumer<T> consumer = new DirectConsumer<>("ser-consumer", service, urls, LB, 0, 10_000, async,
                Map.of("payload", String.valueOf(PAYLOAD_LIMIT)));
        CONSUMERS.add(consumer);
        consumer.awaitConnected();
        return consumer;
    }

    /** Adds {@code prefix} to the consumer's (not the providers') serialization allow list. */
    static void allowOnTheConsumer(DirectConsumer<?> consumer, String prefix) {
        consumer.framework.getBeanFactory().getBean(SerializeSecurityManager.class).addToAllowed(prefix);
    }

    /** One attempt: what the caller got, what polylb recorded, whether the service code ran. */
    record Attempt(Throwable error, Outcome outcome, boolean reached, String counters) {
        @Override
        public String toString() {
            return outcome + (reached ? ", reached the service code" : ", never reached the service code") + " ("
                    + counters + "); the caller got " + describe(error);
        }
    }

    /**
     * Calls {@code call} with a fresh callId (an async consumer's call: waits for its future) and
     * returns the attempt's outcome as polylb recorded it (null if not exactly one attempt ended).
     */
    static <T> Attempt attempt(String what, DirectConsumer<T> consumer, Function<String, Object> call)
            throws InterruptedException {
        String callId = what + "-" + System.nanoTime();
        ServiceCounters before = consumer.counters();
        Throwable error = null;
        try {
            Object value = call.apply(callId);
            if (value == null) {
                CompletableFuture<Object> future = RpcContext.getServiceContext().getCompletableFuture();
                future.get(20, TimeUnit.SECONDS);
            }
        } catch (Exception e) {
            error = e;
        }
        ServiceCounters after = consumer.awaitNoneInFlight();
        Attempt attempt = new Attempt(error, after.outcomeSince(before), REACHED.contains(callId), after.toString());
        System.out.println(what + ": " + attempt);
        return attempt;
    }

    static String describe(Throwable t) {
        StringBuilder s = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            s.append(s.length() == 0 ? "" : " <- ").append(c.getClass().getSimpleName());
            if (c instanceof RpcException) {
                s.append("(code ").append(((RpcException) c).getCode()).append(')');
            }
            String message = String.valueOf(c.getMessage());
            s.append(": ").append(message.length() > 160 ? message.substring(0, 160) + "..." : message);
        }
        return s.length() == 0 ? "a value" : s.toString();
    }

    /** The first {@code type} in {@code t}'s causes, or null. */
    static <E extends Throwable> E find(Throwable t, Class<E> type) {
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (type.isInstance(c)) {
                return type.cast(c);
            }
        }
        return null;
    }

    /** DubboInvoker's RpcException for a request it could not send: around its send's RemotingException. */
    static RpcException sendError(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (c instanceof RpcException && c.getCause() instanceof RemotingException) {
                return (RpcException) c;
            }
        }
        return null;
    }

    @Test
    void requestsTheDubboProtocolCannotEncodeAreNeverSentAndNoVerdict() throws Exception {
        for (boolean async : new boolean[] {false, true}) {
            String mode = async ? "dubbo async" : "dubbo sync";
            DirectConsumer<PayloadService> consumer = consumer(PayloadService.class, DUBBO.directUrls(), async);
            PayloadService service = consumer.reference.get();
            Map<String, Attempt> attempts = new LinkedHashMap<>();
            // Outside the allow list (STRICT): DefaultSerializeClassChecker refuses it.
            attempts.put("not Serializable, not allowed",
                    attempt(mode + " not allowed", consumer, id -> service.take(id, new NotSerializable())));
            attempts.put("Serializable, outside the allow list",
                    attempt(mode + " foreign", consumer, id -> service.take(id, new Foreign())));
            // Allowed by name: the Serializable check refuses it.
            allowOnTheConsumer(consumer, NotSerializable.class.getName());
            attempts.put("not Serializable, allowed",
                    attempt(mode + " not Serializable", consumer, id -> service.take(id, new NotSerializable())));
            for (Map.Entry<String, Attempt> e : attempts.entrySet()) {
                Attempt a = e.getValue();
                String what = mode + ", " + e.getKey() + ": " + a;
                // DubboInvoker threw an RpcException SERIALIZATION_EXCEPTION around NettyChannel.send's
                // RemotingException (the request is encoded in the calling thread).
                RpcException sendError = sendError(a.error());
                assertNotNull(sendError, what);
                assertTrue(sendError.isSerialization(), what);
                assertFalse(a.reached(), what);
                assertEquals(Outcome.CANCELLED, a.outcome(), what);
            }
            // Over the consumer's payload limit: refused by the codec before it is sent.
            Attempt big = attempt(mode + " over the payload limit", consumer,
                    id -> service.take(id, "x".repeat(2 * PAYLOAD_LIMIT)));
            assertNotNull(find(big.error(), ExceedPayloadLimitException.class), big.toString());
            assertEquals(RpcException.NETWORK_EXCEPTION, sendError(big.error()).getCode(), big.toString());
            assertFalse(big.reached(), big.toString());
            assertEquals(Outcome.CANCELLED, big.outcome(), big.toString());
            // The providers were never asked: a good call still goes out and is a success.
            Attempt ok = attempt(mode + " ok", consumer, id -> service.take(id, "fine"));
            assertTrue(ok.error() == null && ok.reached() && ok.outcome() == Outcome.SUCCESS, ok.toString());
        }
    }

    @Test
    void requestsTripleCannotEncodeAreNeverSentAndNoVerdict() throws Exception {
        for (boolean async : new boolean[] {false, true}) {
            String mode = async ? "tri async" : "tri sync";
            DirectConsumer<PayloadService> consumer = consumer(PayloadService.class, TRI.directUrls(), async);
            PayloadService service = consumer.reference.get();
            List<Attempt> attempts = List.of(
                    attempt(mode + " not Serializable", consumer, id -> service.take(id, new NotSerializable())),
                    attempt(mode + " foreign", consumer, id -> service.take(id, new Foreign())));
            for (Attempt a : attempts) {
                assertUnsentByTriple(a);
            }
            Attempt ok = attempt(mode + " ok", consumer, id -> service.take(id, "fine"));
            assertTrue(ok.error() == null && ok.reached() && ok.outcome() == Outcome.SUCCESS, ok.toString());
        }
        // Protobuf (unwrapped): a null request cannot be packed.
        DirectConsumer<OutcomeService> protobuf = consumer(OutcomeService.class, TRI_PROTOBUF.directUrls(), false);
        assertUnsentByTriple(attempt("tri protobuf null request", protobuf,
                id -> protobuf.reference.get().answerStatus(null)));
    }

    /**
     * Triple's own refusal to send: INTERNAL "Serialize request failed" (TripleClientCall
     * .sendMessage), or "Call aborted cause client exception" (TripleInvoker.doInvoke) when the
     * cancel after the failed packing races the stream's creation; a CANCELLED either way.
     */
    private static void assertUnsentByTriple(Attempt a) {
        StatusRpcException status = find(a.error(), StatusRpcException.class);
        assertNotNull(status, a.toString());
        assertEquals(TriRpcStatus.Code.INTERNAL, status.getStatus().code, a.toString());
        assertTrue(Set.of("Serialize request failed", "Call aborted cause client exception")
                .contains(status.getStatus().description), a.toString());
        assertFalse(a.reached(), a.toString());
        assertEquals(Outcome.CANCELLED, a.outcome(), a.toString());
    }

    @Test
    void aRequestTheProviderCannotDeserializeIsTheProvidersOutcome() throws Exception {
        // Over the dubbo protocol the provider answers BAD_REQUEST ("Fail to decode request"): a
        // failure, as any provider that could not serve.
        DirectConsumer<PayloadService> dubbo = consumer(PayloadService.class, DUBBO.directUrls(), false);
        Attempt a = attempt("dubbo unreadable request", dubbo,
                id -> dubbo.reference.get().takeUnreadable(id, new PayloadService.Unreadable()));
        RemotingException decode = find(a.error(), RemotingException.class);
        assertTrue(decode != null && decode.getMessage().startsWith("Fail to decode request"), a.toString());
        assertFalse(a.reached(), a.toString());
        assertEquals(Outcome.FAILURE, a.outcome(), a.toString());

        // A class the provider lacks (here: refuses, outside its allow list) where the method takes
        // an Object: hessian2 reads it as a map, the service code runs and answers.
        allowOnTheConsumer(dubbo, "io.polylb.outside.");
        String[] callId = new String[1];
        Attempt lacking = attempt("dubbo class the provider lacks", dubbo,
                id -> dubbo.reference.get().take(callId[0] = id, new Foreign()));
        assertTrue(lacking.error() == null && lacking.reached(), lacking.toString());
        assertEquals("java.util.HashMap", RECEIVED.get(callId[0]), lacking.toString());
        assertEquals(Outcome.SUCCESS, lacking.outcome(), lacking.toString());

        // Over Triple a wrapped call's provider answers with Triple's DecodeException as the
        // call's exception, status OK: read as the provider's answer, a success (as today).
        DirectConsumer<PayloadService> tri = consumer(PayloadService.class, TRI.directUrls(), false);
        // A Triple consumer of a direct URL packs wrapped requests with the serialization of the
        // URL's FrameworkModel, which may be the JVM's default one here (several in one JVM), not
        // the consumer's: the class must be allowed wherever it is packed.
        for (FrameworkModel framework : FrameworkModel.getAllInstances()) {
            framework.getBeanFactory().getOrRegisterBean(SerializeSecurityManager.class)
                    .addToAllowed(PayloadService.Unreadable.class.getName());
        }
        Attempt t = attempt("tri unreadable request", tri,
                id -> tri.reference.get().takeUnreadable(id, new PayloadService.Unreadable()));
        assertNotNull(t.error(), t.toString());
        assertEquals("org.apache.dubbo.remoting.http12.exception.DecodeException", t.error().getClass().getName(),
                t.toString());
        assertFalse(t.reached(), t.toString());
        assertEquals(Outcome.SUCCESS, t.outcome(), t.toString());
    }

    @Test
    void anAnswerTheProviderCannotSerializeIsAFailure() throws Exception {
        // The provider ran the call, then could not encode its answer: over the dubbo protocol it
        // answers BAD_RESPONSE ("Failed to send response"), over Triple the status UNKNOWN. A
        // failure, as for any provider that could not serve (PolylbInvokerFilter.isUnencodable).
        DirectConsumer<PayloadService> dubbo = consumer(PayloadService.class, DUBBO.directUrls(), false);
        Attempt a = attempt("dubbo unserializable answer", dubbo, id -> dubbo.reference.get().giveUnserializable(id));
        RemotingException answer = find(a.error(), RemotingException.class);
        assertTrue(answer != null && answer.getMessage().startsWith("Failed to send response"), a.toString());
        assertTrue(a.reached(), a.toString());
        assertEquals(Outcome.FAILURE, a.outcome(), a.toString());

        DirectConsumer<PayloadService> tri = consumer(PayloadService.class, TRI.directUrls(), false);
        Attempt t = attempt("tri unserializable answer", tri, id -> tri.reference.get().giveUnserializable(id));
        StatusRpcException status = find(t.error(), StatusRpcException.class);
        assertTrue(status != null && status.getStatus().code == TriRpcStatus.Code.UNKNOWN, t.toString());
        assertTrue(t.reached(), t.toString());
        assertEquals(Outcome.FAILURE, t.outcome(), t.toString());
    }
}
