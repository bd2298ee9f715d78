package io.polylb.dubbo;

import org.apache.dubbo.common.stream.StreamObserver;

/** The service the Triple stream test's providers export (Triple only). */
public interface StreamService {
    /**
     * A server stream the test holds open: the provider's name at once, then nothing until the
     * test ends it (TripleStreamsTest.OPEN_STREAMS).
     */
    void held(String callId, StreamObserver<String> messages);

    /** A bi stream: each message is answered with the provider's name; it completes when the consumer's side does. */
    StreamObserver<String> echo(StreamObserver<String> replies);
}
