package io.polylb.grpc;

import io.grpc.Attributes;
import io.grpc.CallOptions;
import io.grpc.ClientStreamTracer;
import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer.PickResult;
import io.grpc.LoadBalancer.PickSubchannelArgs;
import io.grpc.LoadBalancer.Subchannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.polylb.Balancer;
import io.polylb.Invoker;
import io.polylb.Outcome;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * What the gRPC-java policy adds to a call beside the library's own select + report: the picker's
 * pick (method lookup, the endpoint's hold of the pick, the tracer factory and its cleaner) and
 * the stream tracer gRPC makes and closes. In the policy's package, as its picker is not public;
 * gRPC's part (a subchannel, a pick's arguments) is played by hand, as no connection is needed.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
@State(Scope.Benchmark)
public class GrpcPickBench {
    private static final MethodDescriptor<String, String> METHOD = MethodDescriptor.<String, String>newBuilder()
            .setType(MethodDescriptor.MethodType.UNARY)
            .setFullMethodName("bench.Echo/Call")
            .setRequestMarshaller(Strings.INSTANCE)
            .setResponseMarshaller(Strings.INSTANCE)
            .build();

    @Param({"random", "p2c", "peakewma"})
    public String strategy;

    /**
     * The first endpoint id. The policy numbers endpoints from 1 over a channel's life, so a
     * channel that has seen churn has ids above 127, beyond the JVM's cache of boxed Longs
     * ({@code -p firstId=1001}).
     */
    @Param({"1"})
    public long firstId;

    private Balancer lb;
    private int method;
    private PolylbPicker picker;
    private final PickSubchannelArgs args = new Args();
    private final ClientStreamTracer.StreamInfo info = ClientStreamTracer.StreamInfo.newBuilder().build();
    private final Metadata headers = new Metadata();

    @Setup
    public void setUp() {
        lb = new Balancer("loadbalance=" + strategy);
        List<Invoker> invokers = new ArrayList<>();
        Map<Long, Endpoint> endpoints = new HashMap<>();
        for (long id = firstId; id < firstId + 10; id++) {
            Endpoint endpoint = new Endpoint(id, new IdleSubchannel(),
                    new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", 20000 + (int) (id % 1000))));
            endpoint.setState(ConnectivityStateInfo.forNonError(ConnectivityState.READY));
            invokers.add(endpoint.invoker());
            endpoints.put(id, endpoint);
        }
        lb.update(invokers);
        BalancerState state = new BalancerState(lb, false);
        method = state.method(METHOD.getFullMethodName());
        picker = new PolylbPicker(state, endpoints);
    }

    @TearDown
    public void tearDown() {
        lb.close();
    }

    /** The library alone: what a program that selects and reports itself pays. */
    @Benchmark
    public long bareSelectReport() {
        long id = lb.select(method);
        lb.report(method, id, 100, Outcome.SUCCESS);
        return id;
    }

    /** One call through the policy: the pick, its stream's tracer, the stream's close. */
    @Benchmark
    public PickResult policyPickAndClose() {
        PickResult result = picker.pickSubchannel(args);
        ClientStreamTracer tracer = result.getStreamTracerFactory().newClientStreamTracer(info, headers);
        tracer.outboundHeaders();
        tracer.inboundTrailers(headers);
        tracer.streamClosed(Status.OK);
        return result;
    }

    private static final class IdleSubchannel extends Subchannel {
        @Override
        public void shutdown() {}

        @Override
        public void requestConnection() {}

        @Override
        public Attributes getAttributes() {
            return Attributes.EMPTY;
        }
    }

    private static final class Args extends PickSubchannelArgs {
        private final Metadata headers = new Metadata();

        @Override
        public CallOptions getCallOptions() {
            return CallOptions.DEFAULT;
        }

        @Override
        public Metadata getHeaders() {
            return headers;
        }

        @Override
        public MethodDescriptor<?, ?> getMethodDescriptor() {
            return METHOD;
        }
    }

    private enum Strings implements MethodDescriptor.Marshaller<String> {
        INSTANCE;

        @Override
        public InputStream stream(String value) {
            return new ByteArrayInputStream(value.getBytes());
        }

        @Override
        public String parse(InputStream stream) {
            return "";
        }
    }
}
