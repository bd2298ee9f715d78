package io.polylb;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;

/**
 * A polylb load balancer over one set of invokers. Thread-safe: share one instance.
 *
 * <pre>{@code
 * try (Balancer lb = new Balancer("loadbalance=leastactive")) {
 *     lb.update(List.of(Invoker.of(1, "10.0.0.1:20880"), Invoker.of(2, "10.0.0.2:20880").withWeight(200)));
 *     int sayHello = lb.method("sayHello");
 *     long id = lb.select(sayHello);
 *     // ... make the call to invoker `id`, then:
 *     lb.report(sayHello, id, elapsedMicros, Outcome.SUCCESS);
 * }
 * }</pre>
 *
 * <p>Every {@code select} counts a call as in flight until it is {@linkplain #report reported}
 * (report {@link Outcome#CANCELLED} for a pick that was never sent); a {@link Call} from
 * {@link #call} does both, and cannot forget the report in try-with-resources.
 *
 * <p>Times ({@code nowUs}) are Unix microseconds; 0 means the library's own clock. Passing
 * explicit times makes tests and simulations deterministic.
 *
 * <p>Lifetime: {@link #close()} drops the invoker set and its state at once (each other thread
 * that called this balancer keeps its cached copy of the last set until its next call on a
 * balancer taking the same cache slot, or its exit: see {@code plb_balancer_free}), and every later
 * call throws {@link IllegalStateException}; the native balancer itself (a few KB) is freed by a
 * {@link Cleaner} once the object is unreachable. So {@code close()} may race calls on other
 * threads: such a call either completes or throws {@link IllegalStateException}, and no call can
 * ever reach freed memory, without costing the hot path more than one volatile read.
 */
public final class Balancer implements AutoCloseable {
    /** The method id of the service level, and of the empty method name. */
    public static final int SERVICE_METHOD = 0;

    private static final Cleaner CLEANER = Cleaner.create();
    private static final long[] NO_IDS = new long[0];

    /** The native balancer: never freed while this object is reachable (see {@link Free}). */
    private final long handle;
    private volatile boolean closed;
    /** Serialises update and close, so that no update can reinstall a set after close. */
    private final Object coldLock = new Object();

    /**
     * Creates a balancer from Dubbo-style URL parameters, e.g.
     * {@code "loadbalance=consistenthash&hash.nodes=160"} ({@code loadbalance} defaults to {@code random}).
     *
     * @param config the configuration string; empty for all defaults
     * @throws NullPointerException if {@code config} is null
     * @throws PolylbException {@link Status#INVALID_CONFIG} with a message naming the bad key;
     *     {@link Status#INVALID_UTF8} for a config with a lone surrogate
     */
    public Balancer(String config) {
        Objects.requireNonNull(config, "config");
        long[] handleOut = new long[1];
        String[] messageOut = new String[1];
        int status = Native.create(config, handleOut, messageOut);
        if (status != 0) {
            throw PolylbException.of(status, messageOut[0]);
        }
        this.handle = handleOut[0];
        CLEANER.register(this, new Free(handle));
    }

    /**
     * Frees the native balancer, run by the Cleaner once the Balancer is unreachable. Every method
     * ends with {@code reachabilityFence(this)}, so no call is running by then.
     */
    private static final class Free implements Runnable {
        private final long handle;

        Free(long handle) {
            this.handle = handle;
        }

        @Override
        public void run() {
            Native.free(handle);
        }
    }

    private long live() {
        if (closed) {
            throw closedError();
        }
        return handle;
    }

    private static IllegalStateException closedError() {
        return new IllegalStateException("polylb balancer is closed");
    }

    /** A failed hot call that raced close() saw the emptied set: report the close instead. */
    private PolylbException orClosed(long status) {
        if (closed) {
            throw closedError();
        }
        return PolylbException.of(status);
    }

    /**
     * Replaces the whole set atomically. State of ids that stay (round-robin position, in-flight
     * counts, latency history) is kept. A rejected update changes nothing.
     *
     * @param invokers the new set (empty: no provider)
     * @throws NullPointerException if {@code invokers} or an element is null
     * @throws PolylbException e.g. {@link Status#DUPLICATE_ID}, {@link Status#NEGATIVE_WEIGHT},
     *     {@link Status#ID_OUT_OF_RANGE} (negative id), {@link Status#INVALID_UTF8} (an address or
     *     zone with a lone surrogate), {@link Status#INVALID_ARGUMENT} (an empty address under
     *     {@code consistenthash}, {@code boundedhash}, {@code maglev} or {@code rendezvous}),
     *     {@link Status#LIMIT_EXCEEDED} (e.g. more invokers than {@code maglev}'s table has
     *     slots, {@code maglev.tableSize})
     * @throws IllegalStateException if the balancer is closed
     */
    public void update(List<Invoker> invokers) {
        Objects.requireNonNull(invokers, "invokers");
        int n = invokers.size();
        long[] ids = new long[n];
        String[] addresses = new String[n];
        int[] weights = new int[n];
        long[] startTimes = new long[n];
        int[] warmups = new int[n];
        String[] zones = null;
        for (int i = 0; i < n; i++) {
            Invoker invoker = Objects.requireNonNull(invokers.get(i), "invoker");
            ids[i] = invoker.id();
            addresses[i] = invoker.address();
            weights[i] = invoker.weight();
            startTimes[i] = invoker.startTimeMs();
            warmups[i] = invoker.warmupMs();
            if (invoker.zone() != null) {
                if (zones == null) {
                    zones = new String[n];
                }
                zones[i] = invoker.zone();
            }
        }
        String[] messageOut = new String[1];
        try {
            synchronized (coldLock) {
                int status = Native.update(live(), ids, addresses, weights, startTimes, warmups, zones, messageOut);
                if (status != 0) {
                    throw PolylbException.of(status, messageOut[0]);
                }
            }
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Interns a method name; use the returned id on the hot path. The empty name is
     * {@link #SERVICE_METHOD}. Call once per method and keep the id.
     *
     * @param name the method name
     * @return the method's id, the same for the same name
     * @throws NullPointerException if {@code name} is null
     * @throws PolylbException {@link Status#INVALID_UTF8} for a name with a lone surrogate,
     *     {@link Status#LIMIT_EXCEEDED} for a new name when 2<sup>20</sup> names (the empty one
     *     included) are interned
     * @throws IllegalStateException if the balancer is closed
     */
    public int method(String name) {
        Objects.requireNonNull(name, "name");
        try {
            long id = Native.method(live(), utf8(name, "method name"));
            if (id < 0) {
                throw PolylbException.of(id);
            }
            return (int) id;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Picks an invoker id for {@code method} among the whole set, now, with no key; throws as
     * {@link #select(int, byte[], long)} does.
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @return the chosen invoker's id, in flight until reported
     */
    public long select(int method) {
        return select(method, null, 0);
    }

    /**
     * Picks an invoker id now; throws as {@link #select(int, byte[], long)} does.
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @return the chosen invoker's id, in flight until reported
     */
    public long select(int method, byte[] key) {
        return select(method, key, 0);
    }

    /**
     * Picks an invoker id at time {@code nowUs} (0 = now).
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param nowUs the time in Unix µs; 0: the library's clock
     * @return the chosen invoker's id, in flight until reported
     * @throws PolylbException {@link Status#NO_PROVIDER} for an empty set,
     *     {@link Status#UNKNOWN_METHOD} for an id not returned by {@link #method}
     * @throws IllegalStateException if the balancer is closed
     */
    public long select(int method, byte[] key, long nowUs) {
        if (key == null) {
            return selectPacked(method, 0, 0, 0, nowUs); // no key hashes as the empty key
        }
        if (key.length <= PACKED_KEY_BYTES) {
            return selectPacked(method, packedWord(key, 0), packedWord(key, 8), key.length, nowUs);
        }
        try {
            long id = Native.select(live(), method, key, key.length, nowUs);
            if (id < 0) {
                throw orClosed(id);
            }
            return id;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * As {@link #select(int, byte[])} with the UTF-8 bytes of {@code key} (null: no key), without
     * encoding a copy when the key is ASCII and at most 16 characters long: for hash keys that
     * are strings to begin with, as Dubbo's are.
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key (null: the empty key)
     * @return the chosen invoker's id, in flight until reported
     * @throws PolylbException {@link Status#INVALID_UTF8} for a key with a lone surrogate;
     *     otherwise as {@link #select(int, byte[], long)}
     * @throws IllegalStateException if the balancer is closed
     */
    public long selectByKey(int method, String key) {
        if (key == null) {
            return select(method, null, 0);
        }
        int length = key.length();
        if (length <= PACKED_KEY_BYTES) {
            long low = 0;
            long high = 0;
            for (int i = length - 1; i >= 0; i--) {
                char c = key.charAt(i);
                if (c >= 0x80) {
                    return select(method, utf8(key, "key"), 0);
                }
                if (i >= 8) {
                    high = (high << 8) | c;
                } else {
                    low = (low << 8) | c;
                }
            }
            return selectPacked(method, low, high, length, 0);
        }
        return select(method, utf8(key, "key"), 0);
    }

    /**
     * The UTF-8 bytes of {@code text}. A lone surrogate has no UTF-8 form: {@code getBytes}
     * would turn it into {@code '?'} (so two different names or keys could become one), where
     * the other bindings reject such text; it is {@link Status#INVALID_UTF8} here too, worded as
     * the library words an address: the surrogate taken as its three escaped bytes (as Python
     * passes them), at its index in bytes of UTF-8.
     */
    static byte[] utf8(String text, String what) {
        int length = text.length();
        for (int i = 0; i < length; i++) {
            char c = text.charAt(i);
            if (Character.isSurrogate(c)) {
                if (Character.isHighSurrogate(c)
                        && i + 1 < length
                        && Character.isLowSurrogate(text.charAt(i + 1))) {
                    i++;
                    continue;
                }
                int at = text.substring(0, i).getBytes(StandardCharsets.UTF_8).length;
                throw PolylbException.of(
                        Status.INVALID_UTF8.code(),
                        what + " is not valid UTF-8: invalid utf-8 sequence of 1 bytes from index " + at);
            }
        }
        return text.getBytes(StandardCharsets.UTF_8);
    }

    private long selectPacked(int method, long keyLow, long keyHigh, int keyLength, long nowUs) {
        try {
            long id = Native.selectPackedKey(live(), method, keyLow, keyHigh, keyLength, nowUs);
            if (id < 0) {
                throw orClosed(id);
            }
            return id;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Keys up to this long cross to the native side in two longs: reading a Java array from
     * native code is a call back into the JVM, which costs about as much as the hashing's lookup.
     */
    private static final int PACKED_KEY_BYTES = 16;

    /** Bytes {@code from .. from + 8} of {@code key} (zeros past its end), little-endian. */
    private static long packedWord(byte[] key, int from) {
        long word = 0;
        int end = Math.min(key.length, from + 8);
        for (int i = end - 1; i >= from; i--) {
            word = (word << 8) | (key[i] & 0xFF);
        }
        return word;
    }

    /**
     * Picks among {@code candidates} (null or empty: the whole set), never one of
     * {@code excluded} (ids a failover already tried; ids not in the set are ignored), now;
     * throws as {@link #selectAmong(int, byte[], long[], int, long[], int, long)} does.
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param candidates the ids to pick among (null or empty: the whole set)
     * @param excluded the ids not to pick (null: none)
     * @return the chosen invoker's id, in flight until reported
     */
    public long selectAmong(int method, byte[] key, long[] candidates, long[] excluded) {
        long[] c = candidates == null ? NO_IDS : candidates;
        long[] e = excluded == null ? NO_IDS : excluded;
        return selectAmong(method, key, c, c.length, e, e.length, 0);
    }

    /**
     * As {@link #selectAmong(int, byte[], long[], long[])} with the first {@code candidateCount}
     * / {@code excludedCount} elements of reusable arrays, at time {@code nowUs} (0 = now).
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param candidates the ids to pick among (may be null when {@code candidateCount} is 0)
     * @param candidateCount how many leading elements of {@code candidates} count (0: the whole set)
     * @param excluded the ids not to pick (may be null when {@code excludedCount} is 0)
     * @param excludedCount how many leading elements of {@code excluded} count
     * @param nowUs the time in Unix µs; 0: the library's clock
     * @return the chosen invoker's id, in flight until reported
     * @throws PolylbException {@link Status#UNKNOWN_CANDIDATE} for a candidate not in the set,
     *     {@link Status#NO_CANDIDATE} when every candidate is excluded, and as
     *     {@link #select(int, byte[], long)}
     * @throws IndexOutOfBoundsException when a count is negative or exceeds its array's length
     *     (a null array's is 0)
     * @throws IllegalStateException if the balancer is closed
     */
    public long selectAmong(int method, byte[] key, long[] candidates, int candidateCount, long[] excluded,
            int excludedCount, long nowUs) {
        // The native side copies exactly `count` elements, trusting these checks.
        Objects.checkFromIndexSize(0, candidateCount, candidates == null ? 0 : candidates.length);
        Objects.checkFromIndexSize(0, excludedCount, excluded == null ? 0 : excluded.length);
        try {
            long id = Native.selectAmong(live(), method, key, key == null ? 0 : key.length, candidates,
                    candidateCount, excluded, excludedCount, nowUs);
            if (id < 0) {
                throw orClosed(id);
            }
            return id;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Ends a call selected earlier, now; throws as {@link #report(int, long, long, Outcome, long)}
     * does.
     *
     * @param method the method id the call was selected with
     * @param id the invoker id the select returned
     * @param elapsedUs the call's latency in µs, {@code >= 0}
     * @param outcome how the call ended
     */
    public void report(int method, long id, long elapsedUs, Outcome outcome) {
        report(method, id, elapsedUs, outcome, 0);
    }

    /**
     * Ends a call selected earlier: its latency and outcome. A report for an id no longer in the
     * set is accepted and ignored.
     *
     * @param method the method id the call was selected with
     * @param id the invoker id the select returned
     * @param elapsedUs the call's latency in µs, {@code >= 0}
     * @param outcome how the call ended
     * @param nowUs the time in Unix µs; 0: the library's clock
     * @throws NullPointerException if {@code outcome} is null
     * @throws PolylbException {@link Status#INVALID_ARGUMENT} for a negative elapsed time,
     *     {@link Status#UNKNOWN_METHOD} for a method id not returned by {@link #method}
     * @throws IllegalStateException if the balancer is closed
     */
    public void report(int method, long id, long elapsedUs, Outcome outcome, long nowUs) {
        int code = outcome.code(); // null outcome: NullPointerException before any native call
        try {
            int status = Native.report(live(), method, id, elapsedUs, code, nowUs);
            if (status != 0) {
                // The native call returns a bare code; name the argument it is about.
                throw status == Status.INVALID_ARGUMENT.code() && !closed
                        ? PolylbException.of(status, "invalid argument: elapsedUs = " + elapsedUs + " (want >= 0)")
                        : orClosed(status);
            }
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Selects for one call, to be ended through the returned {@link Call}: in try-with-resources
     * no pick stays in flight, whatever the body does. Throws as {@link #select(int)} does.
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @return the call, in flight until finished or closed
     */
    public Call call(int method) {
        return new Call(this, method, select(method));
    }

    /**
     * As {@link #call(int)}, selecting as {@link #select(int, byte[])} does.
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @return the call, in flight until finished or closed
     */
    public Call call(int method, byte[] key) {
        return new Call(this, method, select(method, key));
    }

    /**
     * As {@link #call(int)}, selecting as {@link #selectAmong(int, byte[], long[], long[])} does
     * (e.g. a failover's retry, with the ids it already tried excluded).
     *
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param candidates the ids to pick among (null or empty: the whole set)
     * @param excluded the ids not to pick (null: none)
     * @return the call, in flight until finished or closed
     */
    public Call callAmong(int method, byte[] key, long[] candidates, long[] excluded) {
        return new Call(this, method, selectAmong(method, key, candidates, excluded));
    }

    /**
     * What {@link #call(int, byte[], Body)} runs: sends the request to invoker {@code id}.
     *
     * @param <T> the call's result
     * @param <E> the checked exception the body may throw
     */
    @FunctionalInterface
    public interface Body<T, E extends Exception> {
        /**
         * Makes the call.
         *
         * @param id the selected invoker's id
         * @return the call's result
         * @throws E when the call fails; reported by its type (see {@link Balancer#call(int,
         *     byte[], Body)})
         */
        T run(long id) throws E;
    }

    /**
     * Selects, runs {@code body} with the chosen id, and reports the call by how the body ended,
     * as Python's {@code with lb.call()} judges its block: a return is a {@link Outcome#SUCCESS};
     * anything thrown is reported, then rethrown unchanged: {@link Outcome#TIMEOUT} for a {@link
     * java.util.concurrent.TimeoutException}, an {@link java.io.InterruptedIOException} (a
     * socket's timeout), a {@link java.net.http.HttpTimeoutException}, an asynchronous channel's
     * {@link java.nio.channels.InterruptedByTimeoutException} or one of Apache Dubbo's timeouts,
     * {@link Outcome#CANCELLED} for an {@link
     * InterruptedException}, a {@link java.util.concurrent.CancellationException}, a {@link
     * java.nio.channels.ClosedByInterruptException} or anything thrown while the thread is
     * interrupted (this side gave up), {@link Outcome#FAILURE} for anything else (a refused
     * connection counts against the provider; so does an {@link Error}, as Python counts its
     * {@code MemoryError} and C++ a {@code std::bad_alloc}). A {@link
     * java.util.concurrent.CompletionException} or {@link java.util.concurrent.ExecutionException}
     * is judged by its cause. An error the service answered with (not found, invalid argument) is
     * an answer: catch it in the body and return. Selecting throws as {@link #select(int,
     * byte[])} does, before the body runs.
     *
     * <pre>{@code
     * String reply = lb.call(sayHello, null, id -> client(id).sayHello("world"));
     * }</pre>
     *
     * <p>The report of a body that threw never replaces what it threw (on a balancer closed
     * meanwhile it is dropped); after a body that returned, a closed balancer throws as {@link
     * Call#finish} does.
     *
     * @param <T> the body's result
     * @param <E> the checked exception the body may throw
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param body the call, given the selected id
     * @return what the body returned
     * @throws E what the body threw, after the report
     * @throws NullPointerException if {@code body} is null (before selecting)
     */
    public <T, E extends Exception> T call(int method, byte[] key, Body<T, E> body) throws E {
        Objects.requireNonNull(body, "body");
        return run(call(method, key), body);
    }

    /**
     * The body form of {@link #callAmong}: a failover's retry, judged as {@link #call(int,
     * byte[], Body)} judges its body.
     *
     * @param <T> the body's result
     * @param <E> the checked exception the body may throw
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param candidates the ids to pick among (null or empty: the whole set)
     * @param excluded the ids not to pick (null: none)
     * @param body the call, given the selected id
     * @return what the body returned
     * @throws E what the body threw, after the report
     * @throws NullPointerException if {@code body} is null (before selecting)
     */
    public <T, E extends Exception> T callAmong(int method, byte[] key, long[] candidates, long[] excluded,
            Body<T, E> body) throws E {
        Objects.requireNonNull(body, "body");
        return run(callAmong(method, key, candidates, excluded), body);
    }

    private static <T, E extends Exception> T run(Call call, Body<T, E> body) throws E {
        T result;
        try {
            result = body.run(call.id());
        } catch (Throwable thrown) {
            call.finishQuietly(outcomeOf(thrown, true));
            throw thrown;
        }
        call.finish(Outcome.SUCCESS);
        return result;
    }

    /**
     * What {@link #callAsync} runs: starts the request to invoker {@code id} and returns its stage.
     *
     * @param <T> the call's result
     * @param <E> the checked exception starting the call may throw
     */
    @FunctionalInterface
    public interface AsyncBody<T, E extends Exception> {
        /**
         * Starts the call.
         *
         * @param id the selected invoker's id
         * @return the call's stage, completing when the call ends (never null)
         * @throws E when the call cannot be started; reported by its type
         */
        CompletionStage<T> start(long id) throws E;
    }

    /**
     * The body form for asynchronous clients: selects, starts the call with the chosen id, and
     * reports it when the stage the body returned completes, judged as {@link #call(int, byte[],
     * Body)} judges a body — a value a {@link Outcome#SUCCESS}, an exceptional completion by its
     * exception ({@link java.util.concurrent.TimeoutException}, e.g. from {@code orTimeout}, a
     * {@link Outcome#TIMEOUT}; a cancelled stage {@link Outcome#CANCELLED}; anything else a
     * {@link Outcome#FAILURE}; a {@code CompletionException} judged by its cause), with the time
     * from the select to the completion. The interrupt status of the thread that completes the
     * stage is not consulted: it says nothing about this call.
     *
     * <pre>{@code
     * CompletableFuture<HttpResponse<String>> reply = lb.callAsync(sayHello, null,
     *         id -> http.sendAsync(request(id), BodyHandlers.ofString()));
     * }</pre>
     *
     * <p>The returned future completes with what the stage completed with, after the report (so
     * the balancer has seen the call once it is done). Completed from outside first, it ends the
     * call then and cancels the stage (through {@code toCompletableFuture()}, where the stage
     * allows it): its own timeout ({@code reply.orTimeout(...)}) reports a {@link
     * Outcome#TIMEOUT}, a cancel or a fallback value ({@code complete}, {@code
     * completeOnTimeout}) {@link Outcome#CANCELLED}, another exception as the stage's would be
     * judged — before its dependents run. Its dependent stages are plain futures. Selecting
     * throws as {@link #select(int, byte[])} does, before the body runs; a body that throws is reported as the synchronous body form reports it and its
     * exception rethrown; a body that returns {@code null} is reported {@link Outcome#CANCELLED}
     * and a {@link NullPointerException} thrown. A stage completing after this balancer was
     * closed still completes the returned future; its report goes nowhere, as the close dropped
     * the balancer's state.
     *
     * @param <T> the call's result
     * @param <E> the checked exception the body may throw
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param body starts the call, given the selected id
     * @return a future completing as the body's stage does, after the report
     * @throws E what the body threw, after the report
     * @throws NullPointerException if {@code body} is null (before selecting) or returned null
     */
    public <T, E extends Exception> CompletableFuture<T> callAsync(int method, byte[] key, AsyncBody<T, E> body)
            throws E {
        Objects.requireNonNull(body, "body");
        return runAsync(call(method, key), body);
    }

    /**
     * {@link #callAsync} for a failover's retry: selects as {@link #selectAmong} does.
     *
     * @param <T> the call's result
     * @param <E> the checked exception the body may throw
     * @param method a method id from {@link #method}, or {@link #SERVICE_METHOD}
     * @param key the hash key of hashing strategies (null: the empty key)
     * @param candidates the ids to pick among (null or empty: the whole set)
     * @param excluded the ids not to pick (null: none)
     * @param body starts the call, given the selected id
     * @return a future completing as the body's stage does, after the report
     * @throws E what the body threw, after the report
     * @throws NullPointerException if {@code body} is null (before selecting) or returned null
     */
    public <T, E extends Exception> CompletableFuture<T> callAmongAsync(int method, byte[] key, long[] candidates,
            long[] excluded, AsyncBody<T, E> body) throws E {
        Objects.requireNonNull(body, "body");
        return runAsync(callAmong(method, key, candidates, excluded), body);
    }

    private static <T, E extends Exception> CompletableFuture<T> runAsync(Call call, AsyncBody<T, E> body)
            throws E {
        CompletionStage<T> stage;
        try {
            stage = body.start(call.id());
        } catch (Throwable thrown) {
            call.finishQuietly(outcomeOf(thrown, true));
            throw thrown;
        }
        if (stage == null) {
            call.close();
            throw new NullPointerException("the body of callAsync returned no CompletionStage");
        }
        // The Call passes to the thread that ends it: CallFuture reports it exactly once.
        return new CallFuture<>(call, stage).follow();
    }

    /**
     * How a body's end is judged; {@code onTheCallingThread}: the body ran on this thread, so an
     * interrupt of it is this side giving up (a completing thread's interrupt is not).
     */
    static Outcome outcomeOf(Throwable thrown, boolean onTheCallingThread) {
        Throwable cause = thrown;
        // Bounded: a cause chain can be a cycle (initCause accepts one), and the thread judging
        // it is the one reporting the call.
        for (int depth = 0; depth < MAX_UNWRAPPED_CAUSES
                && (cause instanceof java.util.concurrent.CompletionException
                        || cause instanceof java.util.concurrent.ExecutionException)
                && cause.getCause() != null; depth++) {
            cause = cause.getCause();
        }
        if (cause instanceof InterruptedException
                || cause instanceof java.util.concurrent.CancellationException
                || cause instanceof java.nio.channels.ClosedByInterruptException
                || (onTheCallingThread && Thread.currentThread().isInterrupted())) {
            return Outcome.CANCELLED;
        }
        if (cause instanceof java.util.concurrent.TimeoutException
                || cause instanceof java.io.InterruptedIOException
                || cause instanceof java.net.http.HttpTimeoutException
                || cause instanceof java.nio.channels.InterruptedByTimeoutException
                || isDubboTimeout(cause)) {
            return Outcome.TIMEOUT;
        }
        return Outcome.FAILURE;
    }

    /** How many wrappers {@link #outcomeOf} looks through. */
    private static final int MAX_UNWRAPPED_CAUSES = 64;

    /**
     * A timeout of Apache Dubbo's async calls, which this module does not depend on: its
     * {@code remoting.TimeoutException}, or an {@code RpcException} whose {@code isTimeout()} says
     * so (as the Dubbo adapter's filter judges them). Looked up only for a failed call.
     */
    private static boolean isDubboTimeout(Throwable cause) {
        for (Class<?> type = cause.getClass(); type != null; type = type.getSuperclass()) {
            String name = type.getName();
            if (name.equals("org.apache.dubbo.remoting.TimeoutException")) {
                return true;
            }
            if (name.equals("org.apache.dubbo.rpc.RpcException")) {
                try {
                    return Boolean.TRUE.equals(type.getMethod("isTimeout").invoke(cause));
                } catch (ReflectiveOperationException | RuntimeException e) {
                    return false;
                }
            }
        }
        return false;
    }

    /**
     * One call, selected when made and reported exactly once, with the time since the select.
     * {@code close()} cannot see an exception the try block threw, so such a call is reported
     * CANCELLED; to have it judged as Python's {@code with lb.call()} judges its block (a refused
     * connection a failure), use the body form {@link Balancer#call(int, byte[], Body)}.
     *
     * <pre>{@code
     * try (Balancer.Call call = lb.call(sayHello)) {
     *     boolean ok = send(call.id());
     *     call.finish(ok ? Outcome.SUCCESS : Outcome.FAILURE);
     * } // not finished (an exception, an early return): reported CANCELLED here
     * }</pre>
     *
     * <p>A call is used by one thread (the one that made it, or one it was handed to): it is
     * not synchronized, as a select and its report belong to one request. The balancer stays
     * reachable while a call is.
     *
     * <p>On a balancer closed meanwhile, {@link #finish} does what {@link Balancer#report} does
     * (throws {@link IllegalStateException}, or completes if it raced the close; either way the
     * call is ended), while {@link #close} stays silent: a cancel only undoes the in-flight count,
     * which the balancer's close dropped with the rest of its state, and throwing there would pin
     * an exception on a try block that ended well, or on the body's own exception.
     *
     * <p>Nested rather than {@code io.polylb.Call}: only a balancer makes one, and a top-level
     * {@code Call} would be ambiguous beside {@code okhttp3.Call} or {@code retrofit2.Call} under
     * {@code import io.polylb.*}, as the README's snippets import.
     */
    public static final class Call implements AutoCloseable {
        private final Balancer balancer;
        private final int method;
        private final long id;
        /** Taken after the select: the elapsed time is the call's, which strategies compare. */
        private final long startNanos;
        private boolean pending = true;

        private Call(Balancer balancer, int method, long id) {
            this.balancer = balancer;
            this.method = method;
            this.id = id;
            this.startNanos = System.nanoTime();
        }

        /**
         * The selected invoker's id.
         *
         * @return the id the select returned
         */
        public long id() {
            return id;
        }

        /**
         * Reports the call with {@code outcome} and the time since its select. Only the first
         * finish reports; later ones, and a close after it, do nothing. A null outcome throws
         * {@link NullPointerException} and leaves the call unfinished (close reports it
         * cancelled).
         *
         * @param outcome how the call ended
         * @throws NullPointerException if {@code outcome} is null
         * @throws IllegalStateException when the balancer was closed (see the class documentation)
         */
        public void finish(Outcome outcome) {
            Objects.requireNonNull(outcome, "outcome");
            if (!pending) {
                return;
            }
            pending = false;
            balancer.report(method, id, elapsedUs(), outcome);
        }

        /** {@link #finish}, except that a balancer closed meanwhile is no error. */
        void finishQuietly(Outcome outcome) {
            try {
                finish(outcome);
            } catch (IllegalStateException closed) {
                // The balancer's close already dropped this pick's in-flight count; what the
                // call produced (its exception, its value) is what matters to the caller.
            }
        }

        /** Reports the call {@link Outcome#CANCELLED} unless it was finished. */
        @Override
        public void close() {
            if (!pending) {
                return;
            }
            pending = false;
            try {
                balancer.report(method, id, elapsedUs(), Outcome.CANCELLED);
            } catch (IllegalStateException closed) {
                // The balancer's close already dropped this pick's in-flight count.
            }
        }

        private long elapsedUs() {
            return (System.nanoTime() - startNanos) / 1000;
        }

        @Override
        public String toString() {
            return "Balancer.Call[id=" + id + (pending ? ", in flight]" : ", ended]");
        }
    }

    /**
     * Feeds what a Dubbo provider returned in its {@code lb_adaptive} attachment ({@code curTime}
     * in ms and {@code load}) plus the call's response time; used by {@code adaptive}, accepted
     * and ignored by the other strategies and for an id not in the set.
     *
     * @param method the method id the call was selected with
     * @param id the invoker id the select returned
     * @param providerTimeMs the provider's {@code curTime}, Unix ms, {@code >= 0}
     * @param cpuLoad the provider's {@code load}, finite and {@code >= 0}
     * @param rtUs the call's response time in µs, {@code >= 0}
     * @param nowUs the time in Unix µs; 0: the library's clock
     * @throws PolylbException {@link Status#INVALID_ARGUMENT} for an argument out of its range,
     *     {@link Status#UNKNOWN_METHOD} for a method id not returned by {@link #method}
     * @throws IllegalStateException if the balancer is closed
     */
    public void reportProviderMetrics(int method, long id, long providerTimeMs, double cpuLoad, long rtUs,
            long nowUs) {
        try {
            int status = Native.reportProviderMetrics(live(), method, id, providerTimeMs, cpuLoad, rtUs, nowUs);
            if (status != 0) {
                // The native call returns a bare code; name the argument it is about.
                throw status == Status.INVALID_ARGUMENT.code() && !closed
                        ? PolylbException.of(status, metricsArgumentProblem(providerTimeMs, cpuLoad, rtUs))
                        : orClosed(status);
            }
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    private static String metricsArgumentProblem(long providerTimeMs, double cpuLoad, long rtUs) {
        if (!(cpuLoad >= 0) || Double.isInfinite(cpuLoad)) { // NaN too
            return "invalid argument: cpuLoad = " + cpuLoad + " (want finite and >= 0)";
        }
        if (rtUs < 0) {
            return "invalid argument: rtUs = " + rtUs + " (want >= 0)";
        }
        return providerTimeMs < 0 ? "invalid argument: providerTimeMs = " + providerTimeMs + " (want >= 0)" : null;
    }

    /**
     * Feeds a provider's load report to {@code orca}, now; throws as {@link #reportLoad(long,
     * double, double, double, long)} does.
     *
     * @param id the invoker id the report is about
     * @param qps the queries per second the provider served (failed ones included), finite and
     *     {@code >= 0}
     * @param eps the queries per second of them that failed, finite, {@code >= 0} and at most
     *     {@code qps}
     * @param utilization how busy the provider is (CPU or its own measure, 1.0 = full), finite
     *     and {@code >= 0}
     */
    public void reportLoad(long id, double qps, double eps, double utilization) {
        reportLoad(id, qps, eps, utilization, 0);
    }

    /**
     * Feeds a provider's load report (ORCA's numbers: from a call's trailers, an attachment or
     * out of band) to {@code orca}, which weighs the invoker by {@code qps / (utilization + eps /
     * qps × orca.errorPenalty)}. Reports are kept per invoker, not per method; one with no
     * {@code qps} or no {@code utilization} says nothing of capacity and is ignored. Accepted
     * and ignored by the other strategies and for an id not in the set.
     *
     * @param id the invoker id the report is about
     * @param qps the queries per second the provider served (failed ones included), finite and
     *     {@code >= 0}
     * @param eps the queries per second of them that failed, finite, {@code >= 0} and at most
     *     {@code qps}
     * @param utilization how busy the provider is (CPU or its own measure, 1.0 = full), finite
     *     and {@code >= 0}
     * @param nowUs the time in Unix µs; 0: the library's clock
     * @throws PolylbException {@link Status#INVALID_ARGUMENT} for a number out of its range (the
     *     report changes nothing)
     * @throws IllegalStateException if the balancer is closed
     */
    public void reportLoad(long id, double qps, double eps, double utilization, long nowUs) {
        try {
            int status = Native.reportLoad(live(), id, qps, eps, utilization, nowUs);
            if (status != 0) {
                // The native call returns a bare code; name the argument it is about.
                throw status == Status.INVALID_ARGUMENT.code() && !closed
                        ? PolylbException.of(status, loadReportProblem(qps, eps, utilization))
                        : orClosed(status);
            }
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Says that invoker {@code id}'s connection was established again, now; as {@link
     * #reportReconnect(long, long)}.
     *
     * @param id the invoker id whose connection is back
     */
    public void reportReconnect(long id) {
        reportReconnect(id, 0);
    }

    /**
     * Says that invoker {@code id}'s connection was established again (a gRPC subchannel READY
     * after another state). Under {@code orca} it restarts the invoker's run of load reports, as
     * gRPC's {@code weighted_round_robin} (gRFC A58) does: its weight stops counting at the next
     * pick, and its next report starts a new blackout ({@code orca.blackoutMs}), for the server
     * behind a reconnect may be a restarted, cold process. Accepted and ignored by the other
     * strategies and for an id not in the set. The gRPC policy calls it for its endpoints.
     *
     * @param id the invoker id whose connection is back
     * @param nowUs the time in Unix µs; 0: the library's clock
     * @throws IllegalStateException if the balancer is closed
     */
    public void reportReconnect(long id, long nowUs) {
        try {
            int status = Native.reportReconnect(live(), id, nowUs);
            if (status != 0) {
                throw orClosed(status);
            }
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Why {@link #reportLoad} refuses these numbers (each must be finite and {@code >= 0}, and
     * {@code eps} at most {@code qps}), or null when it accepts them: for callers that check a
     * report before they know which balancer it is for.
     */
    public static String loadReportProblem(double qps, double eps, double utilization) {
        if (!(qps >= 0) || Double.isInfinite(qps)) { // NaN too
            return "invalid argument: qps = " + qps + " (want finite and >= 0)";
        }
        if (!(eps >= 0) || Double.isInfinite(eps)) {
            return "invalid argument: eps = " + eps + " (want finite and >= 0)";
        }
        if (!(utilization >= 0) || Double.isInfinite(utilization)) {
            return "invalid argument: utilization = " + utilization + " (want finite and >= 0)";
        }
        return eps > qps ? "invalid argument: eps = " + eps + " is above qps = " + qps + " (want eps <= qps)" : null;
    }

    /**
     * The set and its counters as JSON, effective weights evaluated now (fields: docs/abi-contract.md).
     *
     * @return one JSON object, {@code {"strategy": ..., "invokers": [...]}}
     * @throws PolylbException {@link Status#PANIC} if the native side failed
     * @throws IllegalStateException if the balancer is closed
     */
    public String statsJson() {
        return statsJson(0);
    }

    /**
     * The set and its counters as JSON, effective weights evaluated at {@code nowUs}.
     *
     * @param nowUs the time in Unix µs; 0: the library's clock
     * @return one JSON object, {@code {"strategy": ..., "invokers": [...]}}
     * @throws PolylbException {@link Status#PANIC} if the native side failed
     * @throws IllegalStateException if the balancer is closed
     */
    public String statsJson(long nowUs) {
        try {
            String json = Native.stats(live(), nowUs);
            if (closed) {
                // close() empties the set after marking the balancer closed: these stats may be
                // of that empty set, and every provider vanishing is no state to export.
                throw closedError();
            }
            if (json == null) {
                throw PolylbException.of(Status.PANIC.code());
            }
            return json;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The strategy's canonical name, e.g. {@code "roundrobin"}.
     *
     * @return the name
     * @throws PolylbException {@link Status#PANIC} if the native side failed
     * @throws IllegalStateException if the balancer is closed
     */
    public String strategy() {
        try {
            String name = Native.strategy(live());
            if (name == null) {
                throw PolylbException.of(Status.PANIC.code());
            }
            return name;
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Whether {@link #close()} was called.
     *
     * @return true once closed
     */
    public boolean isClosed() {
        return closed;
    }

    /**
     * Drops the invoker set and all its state; later calls throw {@link IllegalStateException}.
     * Idempotent, and safe while other threads are calling (see the class documentation).
     */
    @Override
    public void close() {
        synchronized (coldLock) {
            if (closed) {
                return;
            }
            closed = true;
            // The empty set releases every invoker's state now; a select racing this sees it
            // (and throws IllegalStateException through orClosed), never freed memory.
            Native.update(handle, new long[0], new String[0], new int[0], new long[0], new int[0], new String[0],
                    new String[1]);
        }
        Reference.reachabilityFence(this);
    }

    /**
     * The polylb core library's version ({@code plb_version()}), e.g. {@code "0.1.0"}.
     *
     * @return the version
     */
    public static String nativeVersion() {
        return Native.version();
    }

    /** Never throws, also while another thread closes the balancer (loggers call it then). */
    @Override
    public String toString() {
        try {
            return "Balancer[" + strategy() + "]";
        } catch (IllegalStateException closedMeanwhile) {
            return "Balancer[closed]";
        }
    }
}
