package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The loading rules, each in a fresh JVM (a JVM loads a native library once). */
class LoaderProcessTest {
    /** What the child JVMs run. */
    public static final class Probe {
        public static void main(String[] args) {
            try (Balancer lb = new Balancer("loadbalance=roundrobin")) {
                lb.update(List.of(Invoker.of(1, "a:1")));
                System.out.println("loaded " + Balancer.nativeVersion() + " " + lb.select(0));
            }
        }
    }

    private static Result run(String... properties) throws Exception {
        List<String> command = new ArrayList<>();
        command.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        for (String p : properties) {
            command.add("-D" + p);
        }
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(Probe.class.getName());
        Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
        String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(process.waitFor(60, TimeUnit.SECONDS));
        return new Result(process.exitValue(), output);
    }

    record Result(int exit, String output) {}

    @Test
    void extractsIntoTheConfiguredDirectoryAndCleansUp(@TempDir Path dir) throws Exception {
        Result r = run("polylb.tmpdir=" + dir);
        assertEquals(0, r.exit(), r.output());
        assertTrue(r.output().contains("loaded "), r.output());
        try (var left = Files.list(dir)) {
            assertEquals(0, left.count(), "the extracted library is deleted once loaded");
        }
    }

    @Test
    void aTemporaryDirectoryThatFailsIsNamed(@TempDir Path dir) throws Exception {
        Result r = run("polylb.tmpdir=" + dir.resolve("missing"));
        assertNotEquals(0, r.exit(), r.output());
        assertTrue(r.output().contains("the native library in the jar could not be loaded"), r.output());
        assertTrue(r.output().contains(dir.resolve("missing").toString()), r.output());
        assertTrue(r.output().contains("-Dpolylb.tmpdir"), r.output());
    }

    @Test
    void theLibraryPathPropertyWinsAndFailsLoudly() throws Exception {
        String file = System.mapLibraryName(NativeLoader.LIBRARY_NAME);
        String[] platforms = NativeLoader.platforms();
        URL packed = NativeLoader.class.getResource(
                "/META-INF/native/" + platforms[platforms.length - 1] + "/" + file);
        if (packed != null && "file".equals(packed.getProtocol())) {
            Result ok = run("polylb.library.path=" + new File(packed.toURI()));
            assertEquals(0, ok.exit(), ok.output());
        }
        Result missing = run("polylb.library.path=/nonexistent/" + file);
        assertNotEquals(0, missing.exit());
        assertTrue(missing.output().contains("UnsatisfiedLinkError"), missing.output());
    }
}
