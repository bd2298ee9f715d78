package io.polylb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;

import org.junit.jupiter.api.Test;

class NativeLoaderTest {
    @Test
    void architecturesAreNormalized() {
        assertEquals("x86_64", NativeLoader.normalizeArch("amd64"));
        assertEquals("x86_64", NativeLoader.normalizeArch("x86_64"));
        assertEquals("aarch64", NativeLoader.normalizeArch("arm64"));
        assertEquals("aarch64", NativeLoader.normalizeArch("aarch64"));
    }

    @Test
    void theJarCarriesTheLibraryForThisMachine() {
        String file = System.mapLibraryName(NativeLoader.LIBRARY_NAME);
        String platform = NativeLoader.platforms()[NativeLoader.platforms().length - 1];
        assertNotNull(NativeLoader.class.getResource("/META-INF/native/" + platform + "/" + file),
                "missing META-INF/native/" + platform + "/" + file);
        Native.ensureLoaded();
        assertEquals(Native.ABI_VERSION, Native.abiVersion());
    }

    @Test
    void theJarCarriesTheLicense() throws Exception {
        // Apache-2.0 asks for a copy with every redistribution: the build puts the repository's
        // LICENSE in META-INF of every module's jar.
        // Other jars on the test class path (surefire's) carry one too: take the one beside the
        // library's classes.
        String classes = NativeLoader.class.getProtectionDomain().getCodeSource().getLocation().toString();
        java.net.URL license = null;
        for (java.net.URL url : java.util.Collections.list(
                NativeLoader.class.getClassLoader().getResources("META-INF/LICENSE"))) {
            if (url.toString().startsWith(classes) || url.toString().startsWith("jar:" + classes)) {
                license = url;
            }
        }
        assertNotNull(license, "no META-INF/LICENSE beside " + classes);
        byte[] repository = java.nio.file.Files.readAllBytes(java.nio.file.Path.of("../../../LICENSE"));
        try (java.io.InputStream in = license.openStream()) {
            assertTrue(java.util.Arrays.equals(repository, in.readAllBytes()), "not the repository's LICENSE");
        }
    }

    @Test
    void testsRunUnderCheckJniWhenBuiltByMaven() {
        if (Boolean.getBoolean("polylb.test.expectCheckJni")) {
            assertTrue(ManagementFactory.getRuntimeMXBean().getInputArguments().contains("-Xcheck:jni"),
                    ManagementFactory.getRuntimeMXBean().getInputArguments().toString());
        }
    }

    @Test
    void everyStatusCodeHasText() {
        for (Status s : Status.values()) {
            if (s != Status.UNKNOWN) {
                assertEquals(s, Status.of(s.code()));
                assertEquals(s, Status.of(-s.code()));
                assertNotNull(Native.statusMessage(s.code()), s.name());
            }
        }
        assertEquals(Status.UNKNOWN, Status.of(999));
        assertEquals(Status.UNKNOWN, Status.of(Long.MIN_VALUE)); // Math.abs leaves it negative
        assertEquals(Status.UNKNOWN, PolylbException.of(Long.MIN_VALUE).status());
        assertEquals("PANIC", PolylbException.of(-13).status().name());
    }
}
