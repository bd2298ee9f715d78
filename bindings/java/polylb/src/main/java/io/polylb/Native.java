package io.polylb;

/**
 * The JNI entry points implemented by the {@code polylb-jni} crate ({@code Java_io_polylb_Native_*}).
 *
 * <p>Package-private on purpose: {@link Balancer} validates arguments, keeps the handle alive and
 * turns status codes into exceptions. Conventions (mirrored in bindings/java/native/src/lib.rs):
 * hot calls return an id or value {@code >= 0}, or {@code -status}; cold calls return a status and
 * put the library's message in {@code messageOut[0]}. Array lengths passed next to an array are
 * trusted by the native side, so callers must check them first.
 */
final class Native {
    /** Must equal {@code JNI_ABI_VERSION} in the crate; checked when the library loads. */
    static final int ABI_VERSION = 4;

    static {
        NativeLoader.load();
        int loaded = abiVersion();
        if (loaded != ABI_VERSION) {
            throw new UnsatisfiedLinkError("polylb_jni ABI version " + loaded + " does not match the Java API's "
                    + ABI_VERSION + " (a stale library on polylb.library.path or java.library.path?)");
        }
    }

    private Native() {}

    /** Forces the class (and so the library) to load; throws UnsatisfiedLinkError if it cannot. */
    static void ensureLoaded() {}

    static native int abiVersion();

    static native String version();

    static native String statusMessage(int status);

    static native int create(String config, long[] handleOut, String[] messageOut);

    static native void free(long handle);

    static native int update(long handle, long[] ids, String[] addresses, int[] weights, long[] startTimesMs,
            int[] warmupsMs, String[] zones, String[] messageOut);

    static native long method(long handle, byte[] nameUtf8);

    static native long select(long handle, int method, byte[] key, int keyLength, long nowUs);

    /** {@code select} with a key of at most 16 bytes packed little-endian into two longs. */
    static native long selectPackedKey(long handle, int method, long keyLow, long keyHigh, int keyLength, long nowUs);

    static native long selectAmong(long handle, int method, byte[] key, int keyLength, long[] candidates,
            int candidateCount, long[] excluded, int excludedCount, long nowUs);

    static native int report(long handle, int method, long id, long elapsedUs, int outcome, long nowUs);

    static native int reportProviderMetrics(long handle, int method, long id, long providerTimeMs, double cpuLoad,
            long rtUs, long nowUs);

    static native int reportLoad(long handle, long id, double qps, double eps, double utilization, long nowUs);

    static native int reportReconnect(long handle, long id, long nowUs);

    static native String stats(long handle, long nowUs);

    static native String strategy(long handle);
}
