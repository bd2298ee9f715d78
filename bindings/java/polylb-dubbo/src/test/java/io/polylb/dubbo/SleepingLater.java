package io.polylb.dubbo;

import java.util.Set;
import java.util.concurrent.CompletableFuture;

/**
 * A provider of {@link LaterService}: answers its name after sleeping the delay asked, then, given
 * a set, records the callId in it (so a test can wait for the late answers of calls it gave up on).
 */
public class SleepingLater implements LaterService {
    final String name;
    private final Set<String> answered;

    /** Records the callIds it answered in {@code answered}. */
    SleepingLater(String name, Set<String> answered) {
        this.name = name;
        this.answered = answered;
    }

    /** Records nothing. */
    SleepingLater(String name) {
        this(name, null);
    }

    @Override
    public String later(String callId, int delayMs) {
        try {
            Thread.sleep(delayMs);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (answered != null) {
            answered.add(callId);
        }
        return name;
    }

    @Override
    public CompletableFuture<String> laterFuture(String callId, int delayMs) {
        return CompletableFuture.completedFuture(later(callId, delayMs));
    }
}
