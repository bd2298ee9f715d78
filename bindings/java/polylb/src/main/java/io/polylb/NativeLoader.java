package io.polylb;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads the JNI library, in this order:
 * <ol>
 *   <li>the file named by the system property {@value #PATH_PROPERTY}, if set (no fallback: a
 *       wrong path is an error, not a silent switch to another copy);</li>
 *   <li>the copy packed in the jar at {@code META-INF/native/<os>-<arch>/<file>}, extracted to a
 *       temporary file (a JVM can only {@code System.load} a file) in {@value #TMPDIR_PROPERTY}
 *       or {@code java.io.tmpdir};</li>
 *   <li>{@code System.loadLibrary("polylb_jni")}, i.e. {@code java.library.path}.</li>
 * </ol>
 * A JVM lets one class loader load a given file: where another class loader of the JVM (another
 * web application, a plugin) loaded the one found by 1 or 3, this class loader loads a temporary
 * copy of it, as 2 does for each class loader anyway.
 */
final class NativeLoader {
    static final String PATH_PROPERTY = "polylb.library.path";
    /** Where to extract the library (default java.io.tmpdir; set it when /tmp is mounted noexec). */
    static final String TMPDIR_PROPERTY = "polylb.tmpdir";
    static final String LIBRARY_NAME = "polylb_jni";

    private NativeLoader() {}

    static void load() {
        String override = System.getProperty(PATH_PROPERTY);
        if (override != null && !override.isEmpty()) {
            loadFile(Paths.get(override).toAbsolutePath());
            return;
        }
        String fileName = System.mapLibraryName(LIBRARY_NAME);
        UnsatisfiedLinkError extractionFailure = null;
        for (String platform : platforms()) {
            String resource = "/META-INF/native/" + platform + "/" + fileName;
            try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
                if (in == null) {
                    continue;
                }
                loadExtracted(in, fileName);
                return;
            } catch (IOException | UnsatisfiedLinkError e) {
                extractionFailure = new UnsatisfiedLinkError("could not load " + resource + ": " + e
                        + (theTemporaryDirectoryMayBeTheCause(e)
                                ? "; set -D" + TMPDIR_PROPERTY + " to a writable directory not mounted noexec"
                                : ""));
                extractionFailure.initCause(e);
            }
        }
        try {
            System.loadLibrary(LIBRARY_NAME);
        } catch (UnsatisfiedLinkError e) {
            Path found = loadedElsewhere(e) ? onLibraryPath(fileName) : null;
            if (found != null) {
                loadCopy(found, e);
                return;
            }
            // The jar's copy failing to load (a polylb.tmpdir that does not exist, a temporary
            // directory mounted noexec, a library for another machine) is the cause to name,
            // not a missing copy.
            String jar = extractionFailure != null
                    ? "the native library in the jar could not be loaded (" + extractionFailure.getMessage() + ")"
                    : "no native library for " + String.join(" or ", platforms()) + " in the jar (META-INF/native/...)";
            UnsatisfiedLinkError error = new UnsatisfiedLinkError("polylb: " + jar + ", and "
                    + fileName + " is not on java.library.path; set -D" + PATH_PROPERTY + "=/path/to/" + fileName);
            error.initCause(extractionFailure != null ? extractionFailure : e);
            throw error;
        }
    }

    /** {@code System.load}, or a copy of the file where another class loader loaded it. */
    private static void loadFile(Path file) {
        try {
            System.load(file.toString());
        } catch (UnsatisfiedLinkError e) {
            if (!loadedElsewhere(e)) {
                throw e;
            }
            loadCopy(file, e);
        }
    }

    private static void loadCopy(Path file, UnsatisfiedLinkError loadedElsewhere) {
        try (InputStream in = Files.newInputStream(file)) {
            loadExtracted(in, file.getFileName().toString());
        } catch (IOException | UnsatisfiedLinkError e) {
            UnsatisfiedLinkError error = new UnsatisfiedLinkError("polylb: " + file
                    + " is loaded by another class loader of this JVM, and a copy for this one could not be loaded: "
                    + e + (theTemporaryDirectoryMayBeTheCause(e)
                            ? "; set -D" + TMPDIR_PROPERTY + " to a writable directory not mounted noexec"
                            : ""));
            error.initCause(e);
            error.addSuppressed(loadedElsewhere);
            throw error;
        }
    }

    /** The JVM's refusal to load one file in a second class loader. */
    private static boolean loadedElsewhere(UnsatisfiedLinkError e) {
        String message = e.getMessage();
        return message != null && message.contains("already loaded in another classloader");
    }

    /**
     * Whether the temporary file's directory may be why a copy did not load: an I/O error (no
     * such directory, not writable) or a mapping refused (mounted noexec). Not a library for
     * another machine, whose error the JVM words itself.
     */
    private static boolean theTemporaryDirectoryMayBeTheCause(Throwable e) {
        String message = e.getMessage();
        return e instanceof IOException
                || (message != null && (message.contains("failed to map segment") || message.contains("not permitted")));
    }

    /** The library file {@code System.loadLibrary} finds on {@code java.library.path}, if any. */
    private static Path onLibraryPath(String fileName) {
        for (String dir : System.getProperty("java.library.path", "").split(java.io.File.pathSeparator)) {
            if (dir.isEmpty()) {
                continue;
            }
            Path file = Paths.get(dir, fileName).toAbsolutePath();
            if (Files.isRegularFile(file)) {
                return file;
            }
        }
        return null;
    }

    private static void loadExtracted(InputStream in, String fileName) throws IOException {
        // A copy of a polylb.library.path file may have a name without an extension.
        int dot = fileName.lastIndexOf('.') < 0 ? fileName.length() : fileName.lastIndexOf('.');
        String prefix = fileName.substring(0, dot) + "-";
        String suffix = fileName.substring(dot);
        String dir = System.getProperty(TMPDIR_PROPERTY);
        Path file = dir == null || dir.isEmpty()
                ? Files.createTempFile(prefix, suffix)
                : Files.createTempFile(Paths.get(dir), prefix, suffix);
        try {
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            System.load(file.toAbsolutePath().toString());
        } finally {
            // The mapping survives the unlink on Unix; Windows keeps the file locked while loaded.
            try {
                Files.deleteIfExists(file);
            } catch (IOException e) {
                file.toFile().deleteOnExit();
            }
        }
    }

    /** Resource directory names for this machine, most specific first. */
    static String[] platforms() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = normalizeArch(System.getProperty("os.arch", ""));
        if (os.startsWith("linux")) {
            String glibc = "linux-" + arch;
            return isMusl() ? new String[] {glibc + "-musl", glibc} : new String[] {glibc};
        }
        if (os.startsWith("mac") || os.startsWith("darwin")) {
            return new String[] {"osx-" + arch};
        }
        if (os.startsWith("windows")) {
            return new String[] {"windows-" + arch};
        }
        return new String[] {os.replaceAll("[^a-z0-9]", "") + "-" + arch};
    }

    static String normalizeArch(String arch) {
        String a = arch.toLowerCase(Locale.ROOT);
        switch (a) {
            case "amd64":
            case "x86_64":
            case "x64":
                return "x86_64";
            case "aarch64":
            case "arm64":
                return "aarch64";
            default:
                return a.replaceAll("[^a-z0-9_]", "");
        }
    }

    /** A glibc build fails to load on musl (Alpine), so musl gets its own directory. */
    private static boolean isMusl() {
        try (var entries = Files.newDirectoryStream(Paths.get("/lib"), "ld-musl-*")) {
            return entries.iterator().hasNext();
        } catch (IOException | RuntimeException e) {
            return false;
        }
    }
}
