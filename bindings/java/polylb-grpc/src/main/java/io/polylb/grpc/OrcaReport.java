package io.polylb.grpc;

import io.grpc.Metadata;

/**
 * The CPU utilization of a server's per-call ORCA load report: the trailer
 * {@code endpoint-load-metrics-bin}, a serialized {@code xds.data.orca.v3.OrcaLoadReport} (what
 * grpc-java's and grpc-go's ORCA server interceptors send). Only its field 1,
 * {@code double cpu_utilization}, is read, straight from the protobuf wire format: the policy
 * then needs neither protobuf nor grpc-xds.
 */
final class OrcaReport {
    static final Metadata.Key<byte[]> TRAILER =
            Metadata.Key.of("endpoint-load-metrics-bin", Metadata.BINARY_BYTE_MARSHALLER);

    private static final int CPU_UTILIZATION = 1;
    private static final int VARINT = 0;
    private static final int FIXED64 = 1;
    private static final int LENGTH_DELIMITED = 2;
    private static final int FIXED32 = 5;

    private OrcaReport() {}

    /** The report's CPU utilization (1.0 is one whole CPU), or 0 without one or if malformed. */
    static double cpuUtilization(Metadata trailers) {
        byte[] report = trailers.get(TRAILER);
        return report == null ? 0 : cpuUtilization(report);
    }

    static double cpuUtilization(byte[] report) {
        Reader in = new Reader(report);
        double cpu = 0;
        while (in.more()) {
            long tag = in.varint();
            int field = (int) (tag >>> 3);
            switch ((int) tag & 7) {
                case VARINT -> in.varint();
                case FIXED64 -> {
                    long bits = in.fixed64();
                    if (field == CPU_UTILIZATION) {
                        cpu = Double.longBitsToDouble(bits); // the last one wins, as protobuf's parsers do
                    }
                }
                case LENGTH_DELIMITED -> in.skip(in.varint());
                case FIXED32 -> in.skip(4);
                default -> {
                    return 0; // groups (deprecated) or garbage: not a report of this shape
                }
            }
            if (in.malformed) {
                return 0;
            }
        }
        return Double.isFinite(cpu) && cpu > 0 ? cpu : 0;
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
