package io.polylb.spring;

import io.polylb.Outcome;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.loadbalancer.CompletionContext;
import org.springframework.cloud.client.loadbalancer.LoadBalancerLifecycle;
import org.springframework.cloud.client.loadbalancer.Request;
import org.springframework.cloud.client.loadbalancer.RequestDataContext;
import org.springframework.cloud.client.loadbalancer.Response;
import org.springframework.cloud.client.loadbalancer.ResponseData;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.client.ClientHttpResponse;

/**
 * Feeds one client's requests back to its polylb balancer: in flight from
 * {@code onStartRequest} (Spring's clients call it just before sending) to {@code onComplete}.
 * It never throws: a bookkeeping problem must not fail the user's request.
 */
@SuppressWarnings({"rawtypes", "unchecked"})
public final class PolylbLifecycle implements LoadBalancerLifecycle<Object, Object, ServiceInstance> {
    private final PolylbClient client;

    public PolylbLifecycle(PolylbClient client) {
        this.client = client;
    }

    @Override
    public boolean supports(Class requestContextClass, Class responseClass, Class serverTypeClass) {
        return ServiceInstance.class.isAssignableFrom(serverTypeClass);
    }

    @Override
    public void onStart(Request<Object> request) {
        // Nothing is counted before a request is really sent: see onStartRequest.
    }

    @Override
    public void onStartRequest(Request<Object> request, Response<ServiceInstance> lbResponse) {
        ServiceInstance instance = lbResponse == null ? null : lbResponse.getServer();
        if (request == null || instance == null) {
            return;
        }
        Long id = client.instances().idOf(instance);
        String key = InstanceSet.keyOf(instance);
        if (id != null && client.inFlight().start(request, key, id)
                && request.getContext() instanceof RequestDataContext context && context.getClientRequest() != null
                && context.getClientRequest().getAttributes() != null
                && context.getClientRequest().getAttributes().get(CancelHooks.ATTRIBUTE) instanceof CancelHooks hooks) {
            // a Gateway exchange: Spring completes nothing if it is cancelled (PolylbGatewayConfiguration)
            hooks.add(() -> client.inFlight().complete(request, key, Outcome.CANCELLED));
        }
    }

    @Override
    public void onComplete(CompletionContext<Object, ServiceInstance, Object> context) {
        if (context.status() == CompletionContext.Status.DISCARD) {
            return; // nothing was picked, nothing was counted
        }
        Response<ServiceInstance> lbResponse = context.getLoadBalancerResponse();
        ServiceInstance instance = lbResponse == null ? null : lbResponse.getServer();
        Request<Object> request = context.getLoadBalancerRequest();
        if (instance == null || request == null) {
            return;
        }
        client.inFlight().complete(request, InstanceSet.keyOf(instance), outcome(context));
    }

    private Outcome outcome(CompletionContext<Object, ServiceInstance, Object> context) {
        if (context.status() == CompletionContext.Status.FAILED) {
            return HttpOutcomes.ofError(context.getThrowable());
        }
        int status = statusOf(context.getClientResponse());
        return status < 0 ? Outcome.SUCCESS : client.outcomes().ofStatus(status);
    }

    /** The HTTP status of what Spring's clients hand over (ResponseData, or a raw response); -1 if none. */
    static int statusOf(Object response) {
        try {
            if (response instanceof ResponseData data) {
                HttpStatusCode code = data.getHttpStatus();
                return code == null ? -1 : code.value();
            }
            if (response instanceof ClientHttpResponse raw) {
                return raw.getStatusCode().value();
            }
        } catch (Exception unreadable) {
            // no status to judge by: the exchange itself succeeded
        }
        return -1;
    }
}
