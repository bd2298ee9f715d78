package io.polylb.grpc;

import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.LoadBalancer;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.SynchronizationContext;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * ORCA's out-of-band load reports (gRFC A51) for {@code orca}: one
 * {@code xds.service.orca.v3.OpenRcaService/StreamCoreMetrics} stream per READY endpoint, opened
 * on its subchannel ({@code Subchannel.asChannel()}: the stream bypasses the picker and is no call
 * of the balancer's), each report with qps and utilization passed to {@code reportLoad} for the
 * endpoint, as the calls' trailers are otherwise. The request and the reports are read and
 * written by hand in protobuf's wire format, so that the policy needs neither protobuf nor
 * grpc-xds.
 *
 * <p>The protocol's rules (A51): the stream opens when the subchannel becomes READY; a server
 * answering {@code UNIMPLEMENTED} has no ORCA service, and the stream is not tried again on that
 * connection (once the subchannel leaves READY and connects again, it is tried once more); any
 * other end while READY opens it again, at once if the stream had brought a report, else after an
 * exponential backoff (1 s, × 1.6, at most 120 s, ± 20 %). A stream is cancelled when its
 * subchannel leaves READY, its endpoint leaves the resolver's list, the option is turned off, or
 * the policy shuts down.
 *
 * <p>Every method but the listener's {@code onMessage} runs in the channel's synchronization
 * context.
 */
final class OrcaOob {
    private static final Logger logger = Logger.getLogger(OrcaOob.class.getName());

    static final String FULL_METHOD_NAME = "xds.service.orca.v3.OpenRcaService/StreamCoreMetrics";
    /** The request is the report interval in nanoseconds, the responses the reports' numbers. */
    static final MethodDescriptor<Long, OrcaReport.Load> STREAM_CORE_METRICS =
            MethodDescriptor.<Long, OrcaReport.Load>newBuilder()
                    .setType(MethodDescriptor.MethodType.SERVER_STREAMING)
                    .setFullMethodName(FULL_METHOD_NAME)
                    .setRequestMarshaller(new RequestMarshaller())
                    .setResponseMarshaller(new ReportMarshaller())
                    .build();

    static final long INITIAL_BACKOFF_NANOS = TimeUnit.SECONDS.toNanos(1);
    static final long MAX_BACKOFF_NANOS = TimeUnit.SECONDS.toNanos(120);
    private static final double BACKOFF_MULTIPLIER = 1.6;
    private static final double BACKOFF_JITTER = 0.2;

    private final LoadBalancer.Helper helper;
    private final Supplier<BalancerState> state;
    private boolean enabled;
    private long periodNanos;
    private final Map<Endpoint, Stream> streams = new HashMap<>();

    /**
     * @param helper the policy's helper (its synchronization context and scheduler)
     * @param state  the policy's current balancer, read by the streams' reports on gRPC's threads
     */
    OrcaOob(LoadBalancer.Helper helper, Supplier<BalancerState> state) {
        this.helper = helper;
        this.state = state;
    }

    /**
     * Turns the streams on or off, or changes the interval they ask for (a server-streaming
     * request cannot change it: the streams open again); the same settings keep the streams,
     * which report to the policy's balancer of the moment.
     */
    void configure(boolean enable, long newPeriodNanos, Collection<Endpoint> endpoints) {
        if (enable == enabled && (!enable || newPeriodNanos == periodNanos)) {
            return;
        }
        stopAll();
        enabled = enable;
        periodNanos = newPeriodNanos;
        for (Endpoint endpoint : endpoints) {
            update(endpoint);
        }
    }

    boolean enabled() {
        return enabled;
    }

    /** The endpoint's subchannel changed state (or the endpoint is new): opens or closes its stream. */
    void update(Endpoint endpoint) {
        if (!enabled) {
            return;
        }
        Stream stream = streams.get(endpoint);
        if (endpoint.isReady()) {
            if (stream == null) {
                stream = new Stream(endpoint);
                streams.put(endpoint, stream);
            }
            stream.connected();
        } else if (stream != null) {
            stream.disconnected();
        }
    }

    /** The endpoint left the resolver's list. */
    void remove(Endpoint endpoint) {
        Stream stream = streams.remove(endpoint);
        if (stream != null) {
            stream.disconnected();
        }
    }

    /** The policy shuts down. */
    void shutdown() {
        stopAll();
        enabled = false;
    }

    private void stopAll() {
        for (Stream stream : new ArrayList<>(streams.values())) {
            stream.disconnected();
        }
        streams.clear();
    }

    /** A report from the endpoint's stream, on one of gRPC's threads. */
    private void report(long id, OrcaReport.Load load) {
        if (!load.hasCapacity()) {
            return; // as orca reads a trailer without qps or utilization: nothing of capacity
        }
        BalancerState current = state.get();
        if (current == null) {
            return;
        }
        try {
            current.balancer.reportLoad(id, load.qps(), load.eps(), load.utilization());
        } catch (RuntimeException refusedOrGone) {
            // eps above qps (the library refuses the report), or a balancer a config change or
            // the policy's shutdown closed: the report has nowhere to go.
        }
    }

    /** One endpoint's stream, while the option is on and the endpoint listed. */
    private final class Stream {
        private final Endpoint endpoint;
        private ClientCall<Long, OrcaReport.Load> call; // the open stream, or null
        private SynchronizationContext.ScheduledHandle retry; // a reopening waiting out its backoff
        /** The server answered UNIMPLEMENTED on this connection: no ORCA service there. */
        private boolean refused;
        private boolean refusalLogged;
        private long backoffNanos; // 0: the next failure waits the initial backoff

        Stream(Endpoint endpoint) {
            this.endpoint = endpoint;
        }

        /** The subchannel is READY: opens the stream unless it is open, waiting, or refused. */
        void connected() {
            if (call == null && retry == null && !refused) {
                open();
            }
        }

        /** The subchannel left READY (or the stream is no longer wanted): a new connection starts afresh. */
        void disconnected() {
            if (retry != null) {
                retry.cancel();
                retry = null;
            }
            if (call != null) {
                ClientCall<Long, OrcaReport.Load> open = call;
                call = null; // its close, which follows, is then known as this cancel
                open.cancel("polylb: ORCA out-of-band stream no longer wanted", null);
            }
            refused = false;
            backoffNanos = 0;
        }

        private void open() {
            ClientCall<Long, OrcaReport.Load> opened =
                    endpoint.subchannel.asChannel().newCall(STREAM_CORE_METRICS, CallOptions.DEFAULT);
            call = opened;
            opened.start(new Listener(opened), new Metadata());
            opened.sendMessage(periodNanos);
            opened.halfClose();
            opened.request(1);
        }

        private void closed(ClientCall<Long, OrcaReport.Load> ended, Status status, boolean reported) {
            if (ended != call) {
                return; // one this side cancelled
            }
            call = null;
            if (status.getCode() == Status.Code.UNIMPLEMENTED) {
                refused = true;
                logger.log(refusalLogged ? Level.FINE : Level.INFO, "polylb: " + endpoint.invoker().address()
                        + " serves no ORCA out-of-band reports (" + status
                        + "); orca weighs it without its reports, and the stream is not tried again on this connection");
                refusalLogged = true;
                return;
            }
            if (!endpoint.isReady() || streams.get(endpoint) != this) {
                return; // its subchannel's state change, on its way, settles it
            }
            long delay;
            if (reported) {
                backoffNanos = 0; // a stream that worked: again at once, the backoff afresh
                delay = 0;
            } else {
                backoffNanos = backoffNanos == 0 ? INITIAL_BACKOFF_NANOS
                        : Math.min(MAX_BACKOFF_NANOS, (long) (backoffNanos * BACKOFF_MULTIPLIER));
                delay = (long) (backoffNanos
                        * (1 + BACKOFF_JITTER * (2 * ThreadLocalRandom.current().nextDouble() - 1)));
                logger.log(Level.FINE, "polylb: ORCA out-of-band stream of " + endpoint.invoker().address()
                        + " ended (" + status + "), again in " + TimeUnit.NANOSECONDS.toMillis(delay) + " ms");
            }
            retry = helper.getSynchronizationContext().schedule(() -> {
                retry = null;
                if (endpoint.isReady() && streams.get(endpoint) == this) {
                    open();
                }
            }, delay, TimeUnit.NANOSECONDS, helper.getScheduledExecutorService());
        }

        private final class Listener extends ClientCall.Listener<OrcaReport.Load> {
            private final ClientCall<Long, OrcaReport.Load> of;
            private volatile boolean reported;

            Listener(ClientCall<Long, OrcaReport.Load> of) {
                this.of = of;
            }

            @Override
            public void onMessage(OrcaReport.Load load) {
                reported = true;
                report(endpoint.id, load);
                of.request(1);
            }

            @Override
            public void onClose(Status status, Metadata trailers) {
                helper.getSynchronizationContext().execute(() -> closed(of, status, reported));
            }
        }
    }

    /**
     * {@code OrcaLoadReportRequest { google.protobuf.Duration report_interval = 1; }} from the
     * interval in nanoseconds (0: no interval, the server's minimum).
     */
    static byte[] request(long periodNanos) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        if (periodNanos > 0) {
            ByteArrayOutputStream duration = new ByteArrayOutputStream();
            long seconds = periodNanos / 1_000_000_000L;
            long nanos = periodNanos % 1_000_000_000L;
            if (seconds != 0) {
                duration.write(1 << 3); // Duration.seconds, varint
                varint(duration, seconds);
            }
            if (nanos != 0) {
                duration.write(2 << 3); // Duration.nanos, varint
                varint(duration, nanos);
            }
            out.write(1 << 3 | 2); // report_interval, length-delimited
            varint(out, duration.size());
            out.writeBytes(duration.toByteArray());
        }
        return out.toByteArray();
    }

    private static void varint(ByteArrayOutputStream out, long value) {
        while ((value & ~0x7fL) != 0) {
            out.write((int) (value & 0x7f) | 0x80);
            value >>>= 7;
        }
        out.write((int) value);
    }

    private static final class RequestMarshaller implements MethodDescriptor.Marshaller<Long> {
        @Override
        public InputStream stream(Long periodNanos) {
            return new ByteArrayInputStream(request(periodNanos));
        }

        @Override
        public Long parse(InputStream stream) {
            throw new UnsupportedOperationException("polylb sends ORCA requests, it does not serve them");
        }
    }

    private static final class ReportMarshaller implements MethodDescriptor.Marshaller<OrcaReport.Load> {
        @Override
        public InputStream stream(OrcaReport.Load load) {
            throw new UnsupportedOperationException("polylb reads ORCA reports, it does not send them");
        }

        @Override
        public OrcaReport.Load parse(InputStream stream) {
            try {
                return OrcaReport.load(stream.readAllBytes());
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }
}
