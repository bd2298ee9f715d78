package io.polylb.dubbo;

import org.apache.dubbo.common.stream.StreamObserver;
import org.apache.dubbo.rpc.CancellationContext;

/**
 * The wrapper of a response observer that is a CancelableStreamObserver (see TripleStreams): it
 * stays one for Triple, and the stream's end is watched, as for a plain observer.
 */
final class CancelableStreamEnd<T> extends ForwardingCancelableObserver<T> implements TripleStreams.Wrapper {
    private final TripleStreams.End end;

    CancelableStreamEnd(StreamObserver<T> delegate, TripleStreams.End end) {
        super(delegate);
        this.end = end;
    }

    @SuppressWarnings("unchecked")
    @Override
    public StreamObserver<Object> delegate() {
        return (StreamObserver<Object>) delegate;
    }

    /**
     * Triple gives the stream's own context (TripleInvoker.streamCall), which the user's {@code
     * cancel} cancels; Triple then cancels the call and tells no observer.
     */
    @Override
    public void setCancellationContext(CancellationContext cancellationContext) {
        super.setCancellationContext(cancellationContext);
        if (cancellationContext != null) {
            cancellationContext.addListener(context -> end.cancelled());
        }
    }

    @Override
    public void onError(Throwable throwable) {
        end.error(throwable, delegate);
    }

    @Override
    public void onCompleted() {
        end.completed(delegate);
    }
}
