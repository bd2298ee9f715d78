package io.polylb.dubbo;

import org.apache.dubbo.rpc.protocol.tri.CancelableStreamObserver;
import org.apache.dubbo.rpc.protocol.tri.ClientStreamObserver;

/**
 * The wrapper of a bi or client stream's request observer (see TripleStreams): a consumer that
 * aborts the stream through it ({@code onError}, {@code cancel}) makes Triple cancel the call
 * without telling the response observer (TripleClientCall.cancelByLocal), so the attempt is ended
 * here as a cancel. Everything else, flow control included, goes to Triple's observer as it is;
 * {@code onCompleted} only half-closes the stream (the response observer hears its end).
 */
final class RequestStreamEnd<T> extends ForwardingCancelableObserver<T> implements ClientStreamObserver<T> {
    private final ClientStreamObserver<T> flow;
    private final TripleStreams.End end;

    @SuppressWarnings("unchecked")
    private RequestStreamEnd(Object delegate, TripleStreams.End end) {
        super(delegate);
        this.flow = (ClientStreamObserver<T>) delegate;
        this.end = end;
    }

    /** The wrapper of {@code requests}, or {@code requests} itself if it is not Triple's kind. */
    static Object wrap(Object requests, TripleStreams.End end) {
        if (requests instanceof CancelableStreamObserver && requests instanceof ClientStreamObserver) {
            return new RequestStreamEnd<>(requests, end);
        }
        return requests;
    }

    @Override
    public void onError(Throwable throwable) {
        end.cancelled();
        super.onError(throwable);
    }

    @Override
    public void cancel(Throwable throwable) {
        end.cancelled();
        super.cancel(throwable);
    }

    @Override
    public void request(int count) {
        flow.request(count);
    }

    @Override
    public void setCompression(String compression) {
        flow.setCompression(compression);
    }

    @Override
    public void disableAutoFlowControl() {
        flow.disableAutoFlowControl();
    }

    /** A default method since Dubbo 3.1; abstract in 3.0. */
    @Override
    public void disableAutoRequest() {
        flow.disableAutoRequest();
    }
}
