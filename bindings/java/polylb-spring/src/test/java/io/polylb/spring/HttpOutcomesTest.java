package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import io.polylb.Outcome;
import java.io.IOException;
import java.net.ConnectException;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Test;
import org.springframework.web.client.ResourceAccessException;

class HttpOutcomesTest {
    private final HttpOutcomes defaults =
            new HttpOutcomes(HttpOutcomes.DEFAULT_FAILURE_STATUSES, HttpOutcomes.DEFAULT_TIMEOUT_STATUSES);

    @Test
    void statusesFollowDocsOutcomes() {
        assertEquals(Outcome.SUCCESS, defaults.ofStatus(200));
        assertEquals(Outcome.SUCCESS, defaults.ofStatus(404));
        assertEquals(Outcome.SUCCESS, defaults.ofStatus(400));
        assertEquals(Outcome.FAILURE, defaults.ofStatus(408));
        assertEquals(Outcome.FAILURE, defaults.ofStatus(429));
        assertEquals(Outcome.FAILURE, defaults.ofStatus(500));
        assertEquals(Outcome.FAILURE, defaults.ofStatus(503));
        assertEquals(Outcome.TIMEOUT, defaults.ofStatus(504));
        assertEquals(Outcome.FAILURE, defaults.ofStatus(599));
    }

    @Test
    void statusListsAreConfigurable() {
        HttpOutcomes onlyFiveOhThree = new HttpOutcomes("503", "");
        assertEquals(Outcome.SUCCESS, onlyFiveOhThree.ofStatus(500));
        assertEquals(Outcome.FAILURE, onlyFiveOhThree.ofStatus(503));
        assertEquals(Outcome.SUCCESS, onlyFiveOhThree.ofStatus(504));
        assertThrows(IllegalArgumentException.class, () -> new HttpOutcomes("5xx", ""));
        assertThrows(IllegalArgumentException.class, () -> new HttpOutcomes("503-500", ""));
        assertThrows(IllegalArgumentException.class, () -> new HttpOutcomes("600", ""));
    }

    @Test
    void errorsAreTimeoutsCancelsOrFailures() {
        assertEquals(Outcome.TIMEOUT, HttpOutcomes.ofError(new ResourceAccessException("x", new SocketTimeoutException())));
        assertEquals(Outcome.TIMEOUT, HttpOutcomes.ofError(new RuntimeException(new TimeoutException())));
        assertEquals(Outcome.TIMEOUT, HttpOutcomes.ofError(new ReadTimeoutException()));
        assertEquals(Outcome.CANCELLED, HttpOutcomes.ofError(new CancellationException()));
        assertEquals(Outcome.FAILURE, HttpOutcomes.ofError(new ResourceAccessException("x", new ConnectException())));
        assertEquals(Outcome.FAILURE, HttpOutcomes.ofError(new IOException("reset")));
        assertEquals(Outcome.FAILURE, HttpOutcomes.ofError(null));
    }

    @Test
    void aCycleOfCausesEndsTheSearch() {
        IOException outer = new IOException("outer");
        RuntimeException inner = new RuntimeException("inner");
        outer.initCause(inner);
        inner.initCause(outer); // some libraries build such chains; printStackTrace guards against them
        assertEquals(Outcome.FAILURE, assertTimeoutPreemptively(Duration.ofSeconds(5), () -> HttpOutcomes.ofError(outer)));
        TimeoutException timeout = new TimeoutException("deep");
        RuntimeException loop = new RuntimeException("loop", timeout);
        timeout.initCause(loop);
        assertEquals(Outcome.TIMEOUT, assertTimeoutPreemptively(Duration.ofSeconds(5), () -> HttpOutcomes.ofError(loop)));
    }

    /** Stands for Netty's, known to the mapping by its name only. */
    static final class ReadTimeoutException extends RuntimeException {}
}
