package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.CodedOutputStream;
import com.google.protobuf.Duration;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/** The numbers read from ORCA reports written by protobuf's own encoder. */
class OrcaReportTest {
    /** An OrcaLoadReport's wire form (field numbers of xds.data.orca.v3.OrcaLoadReport). */
    private interface Fields {
        void write(CodedOutputStream out) throws IOException;
    }

    private static byte[] report(Fields fields) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        CodedOutputStream out = CodedOutputStream.newInstance(bytes);
        fields.write(out);
        out.flush();
        return bytes.toByteArray();
    }

    /** A map<string, double> entry: a nested message of key (1) and value (2). */
    private static void mapEntry(CodedOutputStream out, int field, String key, double value) throws IOException {
        int size = CodedOutputStream.computeStringSize(1, key) + CodedOutputStream.computeDoubleSize(2, value);
        out.writeTag(field, 2);
        out.writeUInt32NoTag(size);
        out.writeString(1, key);
        out.writeDouble(2, value);
    }

    @Test
    void readsCpuAmongTheOtherFields() throws IOException {
        byte[] full = report(out -> {
            out.writeDouble(2, 0.7); // mem_utilization
            out.writeUInt64(3, 1L << 40); // rps (deprecated), a long varint
            mapEntry(out, 4, "db", 12.5); // request_cost
            out.writeDouble(1, 0.42); // cpu_utilization
            mapEntry(out, 5, "gpu", 0.3); // utilization
            out.writeDouble(6, 1234.5); // rps_fractional
            out.writeFixed32(99, 7); // a field of a newer version
        });
        assertEquals(0.42, OrcaReport.cpuUtilization(full));
        assertEquals(1.5, OrcaReport.cpuUtilization(report(out -> out.writeDouble(1, 1.5))), "over one CPU");
    }

    @Test
    void readsWhatOrcaWeighsBy() throws IOException {
        OrcaReport.Load load = OrcaReport.load(report(out -> {
            out.writeDouble(1, 0.42); // cpu_utilization
            mapEntry(out, 5, "gpu", 0.3); // utilization
            out.writeDouble(6, 1234.5); // rps_fractional
            out.writeDouble(7, 12.5); // eps
            mapEntry(out, 8, "queue", 7); // named_metrics
            out.writeDouble(9, 0.6); // application_utilization
        }));
        assertEquals(new OrcaReport.Load(0.42, 0.6, 1234.5, 12.5), load);
        assertEquals(0.6, load.utilization(), "the application's utilization first (gRFC A58)");
        assertTrue(load.hasCapacity());

        OrcaReport.Load cpuOnly = OrcaReport.load(report(out -> {
            out.writeDouble(1, 0.42);
            out.writeDouble(6, 100);
        }));
        assertEquals(0.42, cpuOnly.utilization(), "else the CPU's");
        assertTrue(cpuOnly.hasCapacity());
        assertFalse(OrcaReport.load(report(out -> out.writeDouble(6, 100))).hasCapacity(), "no utilization");
        assertFalse(OrcaReport.load(report(out -> out.writeDouble(9, 0.5))).hasCapacity(), "no qps");
        OrcaReport.Load bad = OrcaReport.load(report(out -> {
            out.writeDouble(6, Double.NaN);
            out.writeDouble(7, -3);
            out.writeDouble(9, Double.POSITIVE_INFINITY);
            out.writeDouble(1, 0.5);
        }));
        assertEquals(new OrcaReport.Load(0.5, 0, 0, 0), bad, "NaN, negative and infinite read as absent");
        assertSame(OrcaReport.Load.NONE, OrcaReport.load(new byte[0]));
        assertSame(OrcaReport.Load.NONE, OrcaReport.load(report(out -> out.writeDouble(2, 0.7))));
        byte[] good = report(out -> {
            out.writeDouble(6, 100);
            out.writeDouble(9, 0.5);
        });
        for (int cut = 1; cut < good.length; cut++) {
            assertFalse(OrcaReport.load(Arrays.copyOf(good, cut)).hasCapacity(), "cut at " + cut);
        }
        assertSame(OrcaReport.Load.NONE, OrcaReport.load(Arrays.copyOf(good, 4)), "cut inside a field");
    }

    @Test
    void theOutOfBandRequestIsAnOrcaLoadReportRequest() throws IOException {
        long[][] cases = {{50_000_000L, 0, 50_000_000}, {10_000_000_000L, 10, 0}, {1_500_000_001L, 1, 500_000_001},
                {300_000_000_000L, 300, 0}};
        for (long[] c : cases) {
            byte[] request = OrcaOob.request(c[0]);
            CodedInputStream in = CodedInputStream.newInstance(request);
            assertEquals(1 << 3 | 2, in.readTag(), "report_interval, a message");
            Duration interval = Duration.parseFrom(in.readBytes());
            assertEquals(c[1], interval.getSeconds());
            assertEquals(c[2], interval.getNanos());
            assertTrue(in.isAtEnd(), "no request_cost_names");
        }
        assertEquals(0, OrcaOob.request(0).length, "no interval: the server's minimum");
    }

    @Test
    void noCpuIsZero() throws IOException {
        assertEquals(0, OrcaReport.cpuUtilization(new byte[0]));
        assertEquals(0, OrcaReport.cpuUtilization(report(out -> out.writeDouble(2, 0.7))));
        assertEquals(0, OrcaReport.cpuUtilization(report(out -> out.writeDouble(1, 0))));
        assertEquals(0, OrcaReport.cpuUtilization(report(out -> out.writeDouble(1, -0.5))));
        assertEquals(0, OrcaReport.cpuUtilization(report(out -> out.writeDouble(1, Double.NaN))));
        assertEquals(0, OrcaReport.cpuUtilization(report(out -> out.writeDouble(1, Double.POSITIVE_INFINITY))));
    }

    @Test
    void aMalformedReportIsZero() throws IOException {
        byte[] good = report(out -> {
            mapEntry(out, 4, "db", 12.5);
            out.writeDouble(1, 0.42);
        });
        for (int cut = 1; cut < good.length; cut++) {
            assertEquals(0, OrcaReport.cpuUtilization(Arrays.copyOf(good, cut)), "cut at " + cut);
        }
        assertEquals(0, OrcaReport.cpuUtilization(new byte[] {(byte) 0x0b, 0, 0})); // a group's start
        assertEquals(0, OrcaReport.cpuUtilization(new byte[] {(byte) 0x80, (byte) 0x80})); // varint cut short
    }
}
