package io.polylb.dubbo;

import org.apache.dubbo.rpc.CancellationContext;
import org.apache.dubbo.rpc.protocol.tri.CancelableStreamObserver;
import org.apache.dubbo.rpc.protocol.tri.observer.ClientCallToObserverAdapter;

/**
 * A CancelableStreamObserver that hands every call on to another one, so that a wrapper of
 * Triple's kind of observer (see TripleStreams) still gives it what Triple gives such observers:
 * the stream's cancellation context, its flow control (beforeStart, startRequest), and cancel.
 * Subclasses watch the calls they need to. Triple's module is optional in modular Dubbo: this
 * class and its subclasses are loaded only for an observer of that class.
 */
abstract class ForwardingCancelableObserver<T> extends CancelableStreamObserver<T> {
    final CancelableStreamObserver<T> delegate;

    @SuppressWarnings("unchecked")
    ForwardingCancelableObserver(Object delegate) {
        this.delegate = (CancelableStreamObserver<T>) delegate;
    }

    @Override
    public void setCancellationContext(CancellationContext cancellationContext) {
        super.setCancellationContext(cancellationContext);
        delegate.setCancellationContext(cancellationContext);
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

    @Override
    public void onError(Throwable throwable) {
        delegate.onError(throwable);
    }

    @Override
    public void onCompleted() {
        delegate.onCompleted();
    }
}
