package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.StringWriter;
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
 * The quick start of bindings/java/README.md compiles as written (its imports included) and runs.
 * The two names it leaves to the reader, {@code providerStartMs} and {@code call(id)}, are
 * supplied here; everything else comes from the block itself.
 */
class ReadmeTest {
    private static final Path README = Path.of("..", "README.md");

    static String quickStart() throws Exception {
        String readme = Files.readString(README);
        Matcher m = Pattern.compile("(?s)## Quick start \\(plain Java\\)\\n.*?```java\\n(.*?)```").matcher(readme);
        assertTrue(m.find(), "README.md has no java block under '## Quick start (plain Java)'");
        return m.group(1);
    }

    @Test
    void quickStartCompilesAndRuns(@TempDir Path dir) throws Exception {
        StringBuilder imports = new StringBuilder();
        StringBuilder body = new StringBuilder();
        for (String line : quickStart().split("\n")) {
            (line.startsWith("import ") ? imports : body).append(line).append('\n');
        }
        String source = imports
                + "public class ReadmeQuickStart {\n"
                + "    static long providerStartMs = System.currentTimeMillis() - 60_000;\n"
                + "    static int calls;\n"
                + "    static boolean call(long id) { calls++; return true; }\n"
                + "    public static int run() {\n"
                + body
                + "        return calls;\n"
                + "    }\n"
                + "}\n";
        Path file = dir.resolve("ReadmeQuickStart.java");
        Files.writeString(file, source);

        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        assertNotNull(javac, "tests need a JDK (javax.tools)");
        String classes = new File(Balancer.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath();
        StringWriter diagnostics = new StringWriter();
        List<String> options = new ArrayList<>(List.of("-classpath", classes, "-d", dir.toString(), "-Xlint:none"));
        boolean ok = javac.getTask(diagnostics, null, null, options, null,
                javac.getStandardFileManager(null, null, null).getJavaFileObjects(file.toFile())).call();
        assertTrue(ok, "README quick start does not compile:\n" + diagnostics + "\n" + source);

        try (URLClassLoader loader = new URLClassLoader(new URL[] {dir.toUri().toURL()}, Balancer.class.getClassLoader())) {
            Object calls = loader.loadClass("ReadmeQuickStart").getMethod("run").invoke(null);
            assertEquals(1, calls, "the quick start makes one call");
        }
    }
}
