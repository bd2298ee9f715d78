package io.polylb;

import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;

/**
 * The future {@link Balancer#callAsync} returns. It follows the body's stage and ends the call
 * when the stage completes, before completing itself. Completed from outside first (its own
 * {@code orTimeout}, a fallback through {@code complete} or {@code completeOnTimeout}, a cancel)
 * it ends the call by that completion and cancels the stage: a caller that gave up on the stage
 * must not leave its pick counted in flight until the stage ends, or forever if it never does.
 */
final class CallFuture<T> extends CompletableFuture<T> {
    private final Balancer.Call call;
    private final CompletionStage<T> stage;
    /** The call is reported once, by whichever completion comes first. */
    private final AtomicBoolean ended = new AtomicBoolean();

    CallFuture(Balancer.Call call, CompletionStage<T> stage) {
        this.call = call;
        this.stage = stage;
    }

    /** Registers on the stage; separate from the constructor so that no callback sees it half-built. */
    CallFuture<T> follow() {
        stage.whenComplete((value, thrown) -> {
            try {
                end(thrown == null ? Outcome.SUCCESS : Balancer.outcomeOf(thrown, false));
            } finally {
                if (thrown == null) {
                    super.complete(value);
                } else {
                    super.completeExceptionally(thrown);
                }
            }
        });
        return this;
    }

    @Override
    public boolean complete(T value) {
        boolean endedHere = end(Outcome.CANCELLED); // a fallback instead of the provider's answer
        boolean completed = super.complete(value);
        abandonStageIf(endedHere);
        return completed;
    }

    @Override
    public boolean completeExceptionally(Throwable thrown) {
        Objects.requireNonNull(thrown, "thrown");
        // orTimeout's TimeoutException: a TIMEOUT, the caller's deadline having passed
        boolean endedHere = end(Balancer.outcomeOf(thrown, false));
        boolean completed = super.completeExceptionally(thrown);
        abandonStageIf(endedHere);
        return completed;
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        boolean endedHere = end(Outcome.CANCELLED);
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        abandonStageIf(endedHere);
        return cancelled;
    }

    /**
     * Through {@link #complete}: the JDK's own completes without calling it, and the call stayed
     * in flight, its stage running on.
     */
    @Override
    public CompletableFuture<T> completeAsync(Supplier<? extends T> supplier, Executor executor) {
        Objects.requireNonNull(supplier, "supplier");
        Objects.requireNonNull(executor, "executor");
        executor.execute(() -> {
            T value;
            try {
                value = supplier.get();
            } catch (Throwable thrown) {
                completeExceptionally(new CompletionException(thrown));
                return;
            }
            complete(value);
        });
        return this;
    }

    @Override
    public CompletableFuture<T> completeAsync(Supplier<? extends T> supplier) {
        return completeAsync(supplier, defaultExecutor());
    }

    /** A forced result is a fallback too: the call ends, as by {@link #complete}. */
    @Override
    public void obtrudeValue(T value) {
        boolean endedHere = end(Outcome.CANCELLED);
        super.obtrudeValue(value);
        abandonStageIf(endedHere);
    }

    @Override
    public void obtrudeException(Throwable thrown) {
        Objects.requireNonNull(thrown, "thrown");
        boolean endedHere = end(Balancer.outcomeOf(thrown, false));
        super.obtrudeException(thrown);
        abandonStageIf(endedHere);
    }

    /** Dependent stages ({@code thenApply}, {@code copy}...) are plain futures, tied to no call. */
    @Override
    public <U> CompletableFuture<U> newIncompleteFuture() {
        return new CompletableFuture<>();
    }

    private boolean end(Outcome outcome) {
        if (!ended.compareAndSet(false, true)) {
            return false;
        }
        call.finishQuietly(outcome);
        return true;
    }

    /**
     * Cancels the stage of a call this future ended from outside — after completing itself, as
     * the stage's cancellation comes back here as a completion that must find this one done.
     */
    private void abandonStageIf(boolean endedHere) {
        if (!endedHere) {
            return; // the stage completed first: nothing to abandon
        }
        try {
            stage.toCompletableFuture().cancel(false);
        } catch (UnsupportedOperationException notCancellable) {
            // A stage that offers no future runs on; its completion finds the call ended.
        }
    }
}
