package io.polylb.grpc;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.Duration;
import io.grpc.MethodDescriptor;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.ServerCalls;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A test server's ORCA out-of-band service, {@code xds.service.orca.v3.OpenRcaService}, written
 * here on raw bytes (its own method descriptor, not the policy's), with protobuf's own encoder
 * for the reports and parser for the request's interval. Each stream gets a report at once and
 * then one per interval the client asked for, until the client cancels it.
 */
final class OrcaOobServer implements AutoCloseable {
    static final String FULL_METHOD_NAME = "xds.service.orca.v3.OpenRcaService/StreamCoreMetrics";
    private static final MethodDescriptor<byte[], byte[]> METHOD = MethodDescriptor.<byte[], byte[]>newBuilder()
            .setType(MethodDescriptor.MethodType.SERVER_STREAMING)
            .setFullMethodName(FULL_METHOD_NAME)
            .setRequestMarshaller(Bytes.INSTANCE)
            .setResponseMarshaller(Bytes.INSTANCE)
            .build();

    /** Streams opened by clients. */
    final AtomicInteger opened = new AtomicInteger();
    /** Streams the client cancelled. */
    final AtomicInteger cancelled = new AtomicInteger();
    /** Reports sent. */
    final AtomicInteger reports = new AtomicInteger();
    /** The interval the last stream asked for, in ns (0: none); -1 before any stream. */
    final AtomicLong requestedNanos = new AtomicLong(-1);
    /** When each stream opened ({@code System.nanoTime()}), the last one's. */
    final AtomicLong lastOpenedNanos = new AtomicLong();
    /** rps_fractional, eps and application_utilization of the reports; null: empty reports. */
    final AtomicReference<double[]> load = new AtomicReference<>();
    /** The next this many streams fail with UNAVAILABLE at once, before any report. */
    final AtomicInteger failNext = new AtomicInteger();
    /** Each stream ends (OK) after this many reports; 0: never. */
    volatile int endAfter;

    private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread thread = new Thread(r, "orca-oob-server");
        thread.setDaemon(true);
        return thread;
    });

    ServerServiceDefinition service() {
        return ServerServiceDefinition.builder("xds.service.orca.v3.OpenRcaService")
                .addMethod(METHOD, ServerCalls.asyncServerStreamingCall(this::stream))
                .build();
    }

    private void stream(byte[] request, StreamObserver<byte[]> response) {
        long interval = interval(request);
        requestedNanos.set(interval);
        lastOpenedNanos.set(System.nanoTime());
        opened.incrementAndGet(); // last: a test that sees the count sees the rest
        if (failNext.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
            response.onError(Status.UNAVAILABLE.withDescription("failing as asked").asRuntimeException());
            return;
        }
        ServerCallStreamObserver<byte[]> stream = (ServerCallStreamObserver<byte[]>) response;
        AtomicReference<ScheduledFuture<?>> task = new AtomicReference<>();
        AtomicInteger sent = new AtomicInteger();
        stream.setOnCancelHandler(() -> {
            cancelled.incrementAndGet();
            ScheduledFuture<?> scheduled = task.get();
            if (scheduled != null) {
                scheduled.cancel(false);
            }
        });
        long period = interval > 0 ? interval : TimeUnit.MILLISECONDS.toNanos(100);
        task.set(timer.scheduleAtFixedRate(() -> {
            if (stream.isCancelled()) {
                return;
            }
            try {
                stream.onNext(Provider.report(0, load.get()));
                reports.incrementAndGet();
                int ends = endAfter;
                if (ends > 0 && sent.incrementAndGet() >= ends) {
                    stream.onCompleted();
                    task.get().cancel(false);
                }
            } catch (RuntimeException cancelledMeanwhile) {
                // the client went away between the check and the send
            }
        }, 0, period, TimeUnit.NANOSECONDS));
    }

    /** OrcaLoadReportRequest.report_interval, in ns (0 when absent). */
    private static long interval(byte[] request) {
        try {
            CodedInputStream in = CodedInputStream.newInstance(request);
            long nanos = 0;
            for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
                if (tag == (1 << 3 | 2)) {
                    Duration duration = Duration.parseFrom(in.readBytes());
                    nanos = duration.getSeconds() * 1_000_000_000L + duration.getNanos();
                } else {
                    in.skipField(tag);
                }
            }
            return nanos;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public void close() {
        timer.shutdownNow();
    }

    private enum Bytes implements MethodDescriptor.Marshaller<byte[]> {
        INSTANCE;

        @Override
        public InputStream stream(byte[] value) {
            return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
            try {
                return stream.readAllBytes();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }
}
