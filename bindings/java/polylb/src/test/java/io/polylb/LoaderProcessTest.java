package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.net.URL;
import java.net.URLClassLoader;
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

    /**
     * Loads the binding's classes in {@code args[1]} class loaders of their own, as application
     * servers give each web application, and makes a balancer in each. {@code args[0]}: "show"
     * (the loaders see the jar's native library), "hide" (they do not: java.library.path or
     * polylb.library.path must serve), "junk" (the jar's library is a file no JVM can load).
     */
    public static final class Loaders {
        public static void main(String[] args) throws Exception {
            String mode = args[0];
            URL classes = Balancer.class.getProtectionDomain().getCodeSource().getLocation();
            Path junk = Files.createTempFile("polylb-junk-", ".so");
            Files.writeString(junk, "not a shared library");
            junk.toFile().deleteOnExit();
            for (int i = 0; i < Integer.parseInt(args[1]); i++) {
                ClassLoader loader = new URLClassLoader(new URL[] {classes}, ClassLoader.getPlatformClassLoader()) {
                    @Override
                    public URL getResource(String name) {
                        if (!name.startsWith("META-INF/native/") || mode.equals("show")) {
                            return super.getResource(name);
                        }
                        try {
                            return mode.equals("junk") ? junk.toUri().toURL() : null;
                        } catch (java.net.MalformedURLException e) {
                            throw new IllegalStateException(e);
                        }
                    }
                };
                Class<?> balancer = Class.forName(Balancer.class.getName(), true, loader);
                assertNotEquals(Balancer.class, balancer, "the loader's own class");
                try (AutoCloseable lb = (AutoCloseable) balancer.getConstructor(String.class)
                        .newInstance("loadbalance=random")) {
                    System.out.println("loader " + i + " loaded " + balancer.getMethod("nativeVersion").invoke(null));
                }
            }
        }
    }

    private static Result run(String... properties) throws Exception {
        return runMain(Probe.class, List.of(properties));
    }

    private static Result runMain(Class<?> main, List<String> properties, String... args) throws Exception {
        List<String> command = new ArrayList<>();
        command.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        for (String p : properties) {
            command.add("-D" + p);
        }
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(main.getName());
        command.addAll(List.of(args));
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

    /** The jar's library for this machine as a file, or null (the tests run from a jar). */
    private static File packedLibrary() throws Exception {
        String[] platforms = NativeLoader.platforms();
        URL packed = NativeLoader.class.getResource("/META-INF/native/" + platforms[platforms.length - 1] + "/"
                + System.mapLibraryName(NativeLoader.LIBRARY_NAME));
        return packed != null && "file".equals(packed.getProtocol()) ? new File(packed.toURI()) : null;
    }

    /** Three class loaders, each loading the library as {@code mode} and {@code properties} let it. */
    private static void assertThreeClassLoadersLoad(List<String> properties, String mode) throws Exception {
        Result r = runMain(Loaders.class, properties, mode, "3");
        assertEquals(0, r.exit(), r.output());
        assertTrue(r.output().contains("loader 2 loaded "), r.output());
    }

    @Test
    void everyClassLoaderLoadsTheJarsLibrary() throws Exception {
        assertThreeClassLoadersLoad(List.of(), "show");
    }

    /**
     * The JVM refuses a file a second class loader loads: each later loader takes a copy (of a
     * file named without an extension too).
     */
    @Test
    void theLibraryPathPropertyServesEveryClassLoader(@TempDir Path dir) throws Exception {
        File packed = packedLibrary();
        if (packed != null) {
            assertThreeClassLoadersLoad(List.of("polylb.library.path=" + packed), "hide");
            Path bare = Files.copy(packed.toPath(), dir.resolve("polylbjni"));
            assertThreeClassLoadersLoad(List.of("polylb.library.path=" + bare), "hide");
        }
    }

    @Test
    void javaLibraryPathServesEveryClassLoader() throws Exception {
        File packed = packedLibrary();
        if (packed != null) {
            assertThreeClassLoadersLoad(List.of("java.library.path=" + packed.getParent()), "hide");
        }
    }

    /** The JVM names why a library for another machine (here: no library at all) fails. */
    @Test
    void aLibraryNoJvmCanLoadIsNotBlamedOnTheTemporaryDirectory() throws Exception {
        Result r = runMain(Loaders.class, List.of(), "junk", "1");
        assertNotEquals(0, r.exit(), r.output());
        assertTrue(r.output().contains("the native library in the jar could not be loaded"), r.output());
        assertFalse(r.output().contains("polylb.tmpdir"), r.output());
    }
}
