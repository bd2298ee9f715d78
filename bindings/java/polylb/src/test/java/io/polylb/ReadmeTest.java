package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.StringWriter;
import java.lang.reflect.InvocationTargetException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The java blocks of bindings/java/README.md compile as written (their imports included) and
 * run. The names a block leaves to the reader ({@code providerStartMs} and {@code call(id)} in
 * the quick start, {@code send(id)} in the Balancer.Call section) are supplied here; everything
 * else comes from the block itself.
 */
class ReadmeTest {
    private static final Path README = Path.of("..", "README.md");

    static String quickStart() throws Exception {
        return javaBlock("## Quick start (plain Java)");
    }

    /** The first java block under {@code heading}. */
    static String javaBlock(String heading) throws Exception {
        String readme = Files.readString(README);
        Matcher m = Pattern.compile("(?s)" + Pattern.quote(heading) + "\\n.*?```java\\n(.*?)```").matcher(readme);
        assertTrue(m.find(), "README.md has no java block under '" + heading + "'");
        return m.group(1);
    }

    @Test
    void quickStartCompilesAndRuns(@TempDir Path dir) throws Exception {
        String members = "    static long providerStartMs = System.currentTimeMillis() - 60_000;\n"
                + "    static int calls;\n"
                + "    static boolean call(long id) { calls++; return true; }\n";
        Object calls = compileAndRun(dir, "ReadmeQuickStart", quickStart(), members, "calls");
        assertEquals(1, calls, "the quick start makes one call");
    }

    /** The Balancer.Call block, with a send that answers and with one that throws. */
    @Test
    void callSectionCompilesAndRuns(@TempDir Path dir) throws Exception {
        String block = javaBlock("## One call, reported once (`Balancer.Call`)");
        String members = "    public static final RuntimeException BROKEN = new RuntimeException(\"broken pipe\");\n"
                + "    public static boolean fail;\n"
                + "    static long sent = -1;\n"
                + "    static boolean send(long id) { sent = id; if (fail) throw BROKEN; return true; }\n";
        Object sent = compileAndRun(dir, "ReadmeCall", block, members, "sent");
        assertTrue(sent.equals(1L) || sent.equals(2L), "sent to " + sent);

        try (URLClassLoader loader = loader(dir)) {
            Class<?> snippet = loader.loadClass("ReadmeCall");
            snippet.getDeclaredField("fail").setBoolean(null, true);
            InvocationTargetException thrown = assertThrows(InvocationTargetException.class,
                    () -> snippet.getMethod("run").invoke(null));
            assertSame(snippet.getDeclaredField("BROKEN").get(null), thrown.getCause(),
                    "the body's exception propagates unchanged");
            assertEquals(0, thrown.getCause().getSuppressed().length);
        }
    }

    /** The callAsync block, with a client that answers on another thread. */
    @Test
    void asyncSectionCompilesAndRuns(@TempDir Path dir) throws Exception {
        String block = javaBlock("### Asynchronous clients (`callAsync`)");
        String members = "    static volatile String sent;\n"
                + "    static java.util.concurrent.CompletableFuture<String> sayHelloAsync(long id, String who) {\n"
                + "        return java.util.concurrent.CompletableFuture.supplyAsync(() -> sent = \"hello \" + who + \" from \" + id);\n"
                + "    }\n";
        Object sent = compileAndRun(dir, "ReadmeAsync", block, members, "sent");
        assertTrue("hello world from 1".equals(sent) || "hello world from 2".equals(sent), "sent " + sent);
    }

    /** The subsetting block: every pick in the subset every language agrees on, rows marked. */
    @Test
    void subsettingSectionCompilesAndRuns(@TempDir Path dir) throws Exception {
        String block = javaBlock("### Subsetting");
        String members = "    static java.util.Set<Long> picked = new java.util.TreeSet<>();\n"
                + "    static String stats;\n";
        List<?> result = (List<?>) compileAndRun(dir, "ReadmeSubset", block, members, "java.util.List.of(picked, stats)");
        assertEquals(SubsetTest.CROSS_LANGUAGE_SUBSET, result.get(0),
                "100 leastactive picks use exactly the subset the comment names");
        assertEquals(SubsetTest.CROSS_LANGUAGE_SUBSET.size(),
                SubsetTest.marks((String) result.get(1)).values().stream().filter(b -> b).count(), result.get(1).toString());
    }

    /** The orca block: the reports' capacities in the stats, not counted yet (the blackout). */
    @Test
    void loadReportsSectionCompilesAndRuns(@TempDir Path dir) throws Exception {
        String block = javaBlock("### Load reports (`orca`)");
        String stats = (String) compileAndRun(dir, "ReadmeOrca", block, "    static String stats;\n", "stats");
        assertTrue(stats.contains("\"orca_weight\":200,"), stats);
        assertTrue(stats.contains("\"orca_weight\":333.333"), stats);
        assertFalse(stats.contains("\"orca_counted\":true"), stats);
    }

    /**
     * Compiles {@code block} as the body of {@code run()} in class {@code name} with {@code
     * members}, runs it once, and returns the static field {@code result}.
     */
    private static Object compileAndRun(Path dir, String name, String block, String members, String result)
            throws Exception {
        StringBuilder imports = new StringBuilder();
        StringBuilder body = new StringBuilder();
        for (String line : block.split("\n")) {
            (line.startsWith("import ") ? imports : body).append(line).append('\n');
        }
        String source = imports
                + "public class " + name + " {\n"
                + members
                + "    public static Object run() {\n"
                + body
                + "        return " + result + ";\n"
                + "    }\n"
                + "}\n";
        Path file = dir.resolve(name + ".java");
        Files.writeString(file, source);

        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        assertNotNull(javac, "tests need a JDK (javax.tools)");
        String classes = new File(Balancer.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath();
        StringWriter diagnostics = new StringWriter();
        List<String> options = new ArrayList<>(List.of("-classpath", classes, "-d", dir.toString(), "-Xlint:none"));
        boolean ok = javac.getTask(diagnostics, null, null, options, null,
                javac.getStandardFileManager(null, null, null).getJavaFileObjects(file.toFile())).call();
        assertTrue(ok, "README block does not compile:\n" + diagnostics + "\n" + source);

        try (URLClassLoader loader = loader(dir)) {
            return loader.loadClass(name).getMethod("run").invoke(null);
        }
    }

    private static URLClassLoader loader(Path dir) throws Exception {
        return new URLClassLoader(new URL[] {dir.toUri().toURL()}, Balancer.class.getClassLoader());
    }
}
