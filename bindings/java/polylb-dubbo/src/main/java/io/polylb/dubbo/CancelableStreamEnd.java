package io.polylb.dubbo;

import org.apache.dubbo.common.stream.StreamObserver;
import org.apache.dubbo.rpc.CancellationContext;
import org.apache.dubbo.rpc.protocol.tri.CancelableStreamObserver;
import org.apache.dubbo.rpc.protocol.tri.observer.ClientCallToObserverAdapter;

/**
 * The wrapper of a CancelableStreamObserver (see TripleStreams): Triple gives such an observer
 * the stream's cancellation context and its flow control (TripleInvoker.streamCall), which the
 * user's observer must still get; only the end is watched. A class of its own so that the Triple
 * module's classes are resolved only when an observer of theirs is wrapped.
 */
final class CancelableStreamEnd<T> extends CancelableStreamObserver<T> implements TripleStreams.Wrapper {
    private final CancelableStreamObserver<T> delegate;
    private final TripleStreams.End end;

    @SuppressWarnings("unchecked")
    CancelableStreamEnd(StreamObserver<T> delegate, TripleStreams.End end) {
        this.delegate = (CancelableStreamObserver<T>) delegate;
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
        delegate.setCancellationContext(cancellationContext);
        if (cancellationContext != null) {
            cancellationContext.addListener(context -> end.cancelled());
        }
    }

    @Override
    public CancellationContext getCancellationContext() {
        return delegate.getCancellationContext();
    }

    @Override
    public void cancel(Throwable throwable) {
        delegate.cancel(throwable);
    }

    @Override
    public void beforeStart(ClientCallToObserverAdapter<T> clientCallToObserverAdapter) {
        delegate.beforeStart(clientCallToObserverAdapter);
    }

    @Override
    public void startRequest() {
        delegate.startRequest();
    }

    @Override
    public void onNext(T data) {
        delegate.onNext(data);
    }

    // Reported before the user's observer hears of the end, as in TripleStreams.StreamEnd.
    @Override
    public void onError(Throwable throwable) {
        end.ended(throwable);
        delegate.onError(throwable);
    }

    @Override
    public void onCompleted() {
        end.ended(null);
        delegate.onCompleted();
    }
}
