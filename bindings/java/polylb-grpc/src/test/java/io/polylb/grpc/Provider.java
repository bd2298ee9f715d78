package io.polylb.grpc;

import com.google.protobuf.CodedOutputStream;
import io.grpc.EquivalentAddressGroup;
import io.grpc.ForwardingServerCall;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ServerCalls;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A test provider: a real gRPC server on a loopback port serving {@link EchoService}. A request
 * tells it what to do: {@code ""} answers with its name, {@code "status:CODE"} ends the call with
 * that status, {@code "sleep:MS"} answers after MS ms, {@code "hang"} never answers.
 */
final class Provider implements AutoCloseable {
    final String name;
    final AtomicInteger calls = new AtomicInteger();
    /** Added to every answer's time, to make this provider slow. */
    final AtomicLong delayMs = new AtomicLong();
    /** Counted down when a call starts hanging (or a stream starts). */
    volatile CountDownLatch started = new CountDownLatch(1);
    /** The CPU utilization each call's ORCA load report gives (a double's bits); 0: no report. */
    final AtomicLong cpuUtilization = new AtomicLong();
    /**
     * The {@code rps_fractional}, {@code eps} and {@code application_utilization} each call's ORCA
     * load report gives (for {@code orca}); null: none of them.
     */
    final AtomicReference<double[]> load = new AtomicReference<>();
    /** Ends the open streams. */
    final CountDownLatch endStreams = new CountDownLatch(1);
    private final Server server;

    Provider(String name) throws IOException {
        this(name, NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)));
    }

    Provider(String name, NettyServerBuilder builder) throws IOException {
        this.name = name;
        ServerServiceDefinition service = ServerServiceDefinition.builder(EchoService.SERVICE)
                .addMethod(EchoService.CALL, ServerCalls.asyncUnaryCall(this::unary))
                .addMethod(EchoService.OTHER, ServerCalls.asyncUnaryCall(this::unary))
                .addMethod(EchoService.WATCH, ServerCalls.asyncServerStreamingCall(this::watch))
                .build();
        this.server = builder.addService(ServerInterceptors.intercept(service, new OrcaTrailer())).build().start();
    }

    EquivalentAddressGroup endpoint() {
        return new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", server.getPort()));
    }

    private void unary(String request, StreamObserver<String> response) {
        calls.incrementAndGet();
        try {
            long delay = delayMs.get();
            if (request.startsWith("sleep:")) {
                delay += Long.parseLong(request.substring(6));
            }
            if (delay > 0) {
                Thread.sleep(delay);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (request.equals("hang")) {
            started.countDown();
            return; // until the client cancels or the server goes
        }
        if (request.startsWith("status:")) {
            Status.Code code = Status.Code.valueOf(request.substring(7));
            response.onError(code.toStatus().withDescription("asked for").asRuntimeException());
            return;
        }
        response.onNext(name);
        response.onCompleted();
    }

    /** Ends every call with an ORCA load report, as grpc's ORCA server interceptors do. */
    private final class OrcaTrailer implements ServerInterceptor {
        @Override
        public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers,
                ServerCallHandler<Q, R> next) {
            return next.startCall(new ForwardingServerCall.SimpleForwardingServerCall<>(call) {
                @Override
                public void close(Status status, Metadata trailers) {
                    double cpu = Double.longBitsToDouble(cpuUtilization.get());
                    double[] qpsEpsUtilization = load.get();
                    if (cpu > 0 || qpsEpsUtilization != null) {
                        trailers.put(OrcaReport.TRAILER, report(cpu, qpsEpsUtilization));
                    }
                    super.close(status, trailers);
                }
            }, headers);
        }
    }

    /**
     * An OrcaLoadReport with its cpu_utilization (field 1, when {@code cpu > 0}) and, when given,
     * rps_fractional (6), eps (7) and application_utilization (9), by protobuf's encoder.
     */
    static byte[] report(double cpu, double[] qpsEpsUtilization) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try {
            CodedOutputStream out = CodedOutputStream.newInstance(bytes);
            if (cpu > 0) {
                out.writeDouble(1, cpu);
            }
            if (qpsEpsUtilization != null) {
                out.writeDouble(6, qpsEpsUtilization[0]);
                out.writeDouble(7, qpsEpsUtilization[1]);
                out.writeDouble(9, qpsEpsUtilization[2]);
            }
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }

    /** Sends its name, then holds the stream open until {@link #endStreams}. */
    private void watch(String request, StreamObserver<String> response) {
        calls.incrementAndGet();
        response.onNext(name);
        started.countDown();
        new Thread(() -> {
            try {
                endStreams.await();
            } catch (InterruptedException e) {
                return;
            }
            response.onCompleted();
        }).start();
    }

    /** Stops at once, cutting the calls in flight. */
    void kill() throws InterruptedException {
        server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }

    @Override
    public void close() throws InterruptedException {
        endStreams.countDown();
        kill();
    }
}
