package io.polylb.grpc;

import io.grpc.Metadata;

/**
 * The numbers the policy uses from a server's per-call ORCA load report: the trailer
 * {@code endpoint-load-metrics-bin}, a serialized {@code xds.data.orca.v3.OrcaLoadReport} (what
 * grpc-java's and grpc-go's ORCA server interceptors send). Only its fields 1
 * ({@code cpu_utilization}), 6 ({@code rps_fractional}), 7 ({@code eps}) and 9
 * ({@code application_utilization}), all {@code double}, are read, straight from the protobuf
 * wire format: the policy then needs neither protobuf nor grpc-xds.
 */
final class OrcaReport {
    static final Metadata.Key<byte[]> TRAILER =
            Metadata.Key.of("endpoint-load-metrics-bin", Metadata.BINARY_BYTE_MARSHALLER);

    private static final int CPU_UTILIZATION = 1;
    private static final int RPS_FRACTIONAL = 6;
    private static final int EPS = 7;
    private static final int APPLICATION_UTILIZATION = 9;
    private static final int VARINT = 0;
    private static final int FIXED64 = 1;
    private static final int LENGTH_DELIMITED = 2;
    private static final int FIXED32 = 5;

    /**
     * A report's numbers, each finite and {@code > 0} or else 0 (absent, negative, NaN or
     * infinite alike).
     *
     * @param cpuUtilization         {@code cpu_utilization} (1.0 is one whole CPU)
     * @param applicationUtilization {@code application_utilization}
     * @param qps                    {@code rps_fractional}: requests per second the server served
     * @param eps                    {@code eps}: of them, failed per second
     */
    record Load(double cpuUtilization, double applicationUtilization, double qps, double eps) {
        /** No report, or a malformed one. */
        static final Load NONE = new Load(0, 0, 0, 0);

        /** gRFC A58's utilization: the application's when reported, else the CPU's. */
        double utilization() {
            return applicationUtilization > 0 ? applicationUtilization : cpuUtilization;
        }

        /** Whether it says something of capacity: {@code orca} ignores a report without qps or utilization. */
        boolean hasCapacity() {
            return qps > 0 && utilization() > 0;
        }
    }

    private OrcaReport() {}

    /** The report's CPU utilization (1.0 is one whole CPU), or 0 without one or if malformed. */
    static double cpuUtilization(Metadata trailers) {
        return load(trailers).cpuUtilization();
    }

    static double cpuUtilization(byte[] report) {
        return load(report).cpuUtilization();
    }

    /** The report in {@code trailers}, or {@link Load#NONE}. */
    static Load load(Metadata trailers) {
        byte[] report = trailers.get(TRAILER);
        return report == null ? Load.NONE : load(report);
    }

    /** The report's numbers, or {@link Load#NONE} if it is malformed or holds none of them. */
    static Load load(byte[] report) {
        Reader in = new Reader(report);
        double cpu = 0;
        double application = 0;
        double qps = 0;
        double eps = 0;
        while (in.more()) {
            long tag = in.varint();
            int field = (int) (tag >>> 3);
            switch ((int) tag & 7) {
                case VARINT -> in.varint();
                case FIXED64 -> {
                    // The last one of a field wins, as protobuf's parsers do.
                    double value = Double.longBitsToDouble(in.fixed64());
                    switch (field) {
                        case CPU_UTILIZATION -> cpu = value;
                        case RPS_FRACTIONAL -> qps = value;
                        case EPS -> eps = value;
                        case APPLICATION_UTILIZATION -> application = value;
                        default -> { }
                    }
                }
                case LENGTH_DELIMITED -> in.skip(in.varint());
                case FIXED32 -> in.skip(4);
                default -> {
                    return Load.NONE; // groups (deprecated) or garbage: not a report of this shape
                }
            }
            if (in.malformed) {
                return Load.NONE;
            }
        }
        cpu = positive(cpu);
        application = positive(application);
        qps = positive(qps);
        eps = positive(eps);
        return cpu == 0 && application == 0 && qps == 0 && eps == 0 ? Load.NONE : new Load(cpu, application, qps, eps);
    }

    private static double positive(double value) {
        return Double.isFinite(value) && value > 0 ? value : 0;
    }

    /** Reads the wire format; past the end it marks itself malformed instead of throwing. */
    private static final class Reader {
        private final byte[] bytes;
        private int at;
        boolean malformed;

        Reader(byte[] bytes) {
            this.bytes = bytes;
        }

        boolean more() {
            return !malformed && at < bytes.length;
        }

        long varint() {
            long value = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (at >= bytes.length) {
                    break;
                }
                byte b = bytes[at++];
                value |= (long) (b & 0x7f) << shift;
                if (b >= 0) {
                    return value;
                }
            }
            malformed = true;
            return 0;
        }

        long fixed64() {
            if (bytes.length - at < 8) {
                malformed = true;
                return 0;
            }
            long value = 0;
            for (int i = 7; i >= 0; i--) {
                value = (value << 8) | (bytes[at + i] & 0xff);
            }
            at += 8;
            return value;
        }

        void skip(long n) {
            if (n < 0 || n > bytes.length - at) {
                malformed = true;
            } else {
                at += (int) n;
            }
        }
    }
}
