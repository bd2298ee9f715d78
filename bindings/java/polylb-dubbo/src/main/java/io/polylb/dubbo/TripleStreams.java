package io.polylb.dubbo;

import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.stream.StreamObserver;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Result;

/**
 * Streaming calls over Dubbo's Triple protocol, seen to their end. Triple completes a stream
 * call's result as soon as the stream opens (TripleInvoker.invokeServerStream and
 * invokeBiOrClientStream): taken as the call's end, an open stream would leave the in-flight
 * count at once, and its latency would be the few microseconds of opening it, a fast answer the
 * provider never gave. So the call's response observer, which Triple tells of the stream's end
 * (ObserverToClientCallListenerAdapter: {@code onCompleted} on status OK, else {@code onError}
 * with the status), is wrapped, and the call is reported when the stream ends.
 *
 * <p>Triple tells the observer only of an end from the provider's side: a status the provider
 * sent, or CANCELLED when the connection closed or the server reset the stream
 * (TripleClientCall.onCancelByRemote). The consumer's own cancel (TripleClientCall.cancelByLocal)
 * reaches no observer, and is seen here instead ({@link End#cancelled}). So a CANCELLED the
 * observer hears of is no cancel of the consumer's, but a stream the provider could not serve
 * (PolylbInvokerFilter.streamOutcome).
 *
 * <p>Which argument is the response observer follows TripleInvoker: the second of a server
 * stream with a request, otherwise the first. A Triple method with a StreamObserver parameter is
 * a stream method (ReflectionMethodDescriptor refuses any other signature with one), and stubs
 * pass the observer among the arguments, though not among the parameter types; so the
 * arguments decide.
 *
 * <p>An observer that is a CancelableStreamObserver (the user's handle to cancel the stream, a
 * reactive stub's publisher) keeps being one: its wrapper is a CancelableStreamObserver too and
 * hands Triple's calls of that class on to it, and it listens to the stream's cancellation
 * context, as a cancel through it ends the stream without a word to the observer. For the same
 * reason a bi or client stream's request observer is wrapped (RequestStreamEnd). That class is in the optional Triple module of
 * modular Dubbo, and is resolved only for such an observer, i.e. when Triple is there.
 */
final class TripleStreams {
    private static final Set<String> TRIPLE_PROTOCOLS = Set.of("tri", "grpc");
    private static final String CANCELABLE = "org.apache.dubbo.rpc.protocol.tri.CancelableStreamObserver";

    private TripleStreams() {}

    /**
     * The end of one attempt's stream, reported once: by the stream's observer, or by the
     * attempt's result or exception when the stream never opened (whichever comes first).
     */
    static final class End {
        private final AtomicBoolean claimed = new AtomicBoolean();
        /** Called with null when the stream completed, else with the error it ended with. */
        private final Consumer<Throwable> onEnd;

        End(Consumer<Throwable> onEnd) {
            this.onEnd = onEnd;
        }

        /** True for the first caller only: the one that reports the attempt. */
        boolean claim() {
            return claimed.compareAndSet(false, true);
        }

        /**
         * The consumer cancelled the stream (Triple then tells the response observer nothing:
         * TripleClientCall.cancelByLocal): no verdict on the provider.
         */
        void cancelled() {
            ended(new CancellationException("the stream was cancelled on the consumer's side"));
        }

        /**
         * The stream ended with {@code error}: the call is reported, then {@code user} is told.
         * In that order, a call the user makes from its observer finds this one no longer in
         * flight.
         */
        <T> void error(Throwable error, StreamObserver<T> user) {
            ended(error);
            user.onError(error);
        }

        /** The stream completed: the call is reported, then {@code user} is told. */
        <T> void completed(StreamObserver<T> user) {
            ended(null);
            user.onCompleted();
        }

        void ended(Throwable error) {
            if (claim()) {
                try {
                    onEnd.accept(error);
                } catch (RuntimeException ignored) {
                    // Accounting must never fail the stream it accounts for.
                }
            }
        }
    }

    /**
     * Where the response observer of {@code invocation} is among its arguments when it opens a
     * Triple stream to the provider at {@code providerUrl} (as TripleInvoker reads it: the second
     * argument of a server stream with a request, otherwise the first); -1 for a unary call or
     * another protocol.
     */
    static int responseObserverIndex(Invocation invocation, URL providerUrl) {
        if (providerUrl == null || !TRIPLE_PROTOCOLS.contains(providerUrl.getProtocol())) {
            return -1;
        }
        Object[] arguments = invocation.getArguments();
        if (arguments == null) {
            return -1;
        }
        if (arguments.length == 1 && arguments[0] instanceof StreamObserver) {
            return 0; // a bi or client stream, or a server stream without a request
        }
        if (arguments.length == 2 && arguments[1] instanceof StreamObserver && !(arguments[0] instanceof StreamObserver)) {
            return 1; // a server stream
        }
        return -1;
    }

    /**
     * Puts a wrapper in place of the response observer at {@code index} (from {@link
     * #responseObserverIndex}) that calls {@code onEnd} at the stream's end, and returns the
     * attempt's End. A failover's next attempt with the same invocation wraps the user's
     * observer, not the previous attempt's wrapper.
     */
    static End watch(Invocation invocation, int index, Consumer<Throwable> onEnd) {
        Object[] arguments = invocation.getArguments();
        StreamObserver<Object> observer = userObserver(arguments[index]);
        End end = new End(onEnd);
        try {
            arguments[index] = isCancelable(observer)
                    ? new CancelableStreamEnd<>(observer, end)
                    : new StreamEnd<>(observer, end);
        } catch (LinkageError e) {
            return null; // a Triple unlike the one the adapter was built for: seen as it opens, as before
        }
        return end;
    }

    /**
     * The result of a bi or client stream that opened holds the stream's request observer: it is
     * wrapped too, since a consumer that aborts the stream through it ({@code onError} or {@code
     * cancel}) ends the stream without the response observer hearing of it.
     */
    static void watchRequests(Result opened, End end) {
        Object requests = opened.getValue();
        if (requests != null && isCancelable(requests)) {
            try {
                Object wrapped = RequestStreamEnd.wrap(requests, end);
                if (wrapped != requests) {
                    opened.setValue(wrapped);
                }
            } catch (LinkageError e) {
                // A Triple unlike the one the adapter was built for: an abort goes unseen.
            }
        }
    }

    @SuppressWarnings("unchecked")
    private static StreamObserver<Object> userObserver(Object argument) {
        if (argument instanceof Wrapper) {
            return ((Wrapper) argument).delegate();
        }
        return (StreamObserver<Object>) argument;
    }

    private static boolean isCancelable(Object observer) {
        for (Class<?> c = observer.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals(CANCELABLE)) {
                return true;
            }
        }
        return false;
    }

    /** A wrapper this class put in place of a user's observer. */
    interface Wrapper {
        StreamObserver<Object> delegate();
    }

    /** The wrapper of a plain StreamObserver. */
    static final class StreamEnd<T> implements StreamObserver<T>, Wrapper {
        final StreamObserver<T> delegate;
        private final End end;

        StreamEnd(StreamObserver<T> delegate, End end) {
            this.delegate = delegate;
            this.end = end;
        }

        @SuppressWarnings("unchecked")
        @Override
        public StreamObserver<Object> delegate() {
            return (StreamObserver<Object>) delegate;
        }

        @Override
        public void onNext(T data) {
            delegate.onNext(data);
        }

        @Override
        public void onError(Throwable throwable) {
            end.error(throwable, delegate);
        }

        @Override
        public void onCompleted() {
            end.completed(delegate);
        }
    }
}
