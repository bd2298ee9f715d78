package io.polylb.spring;

import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.filter.GlobalFilter;
import org.springframework.context.annotation.Bean;
import org.springframework.core.Ordered;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Spring Cloud Gateway's {@code ReactiveLoadBalancerClientFilter} completes the lifecycle on its
 * filter chain's success or error only: a client that disconnects mid-proxy cancels the chain and
 * leaves the request counted. A filter just around it ends such a request {@code CANCELLED}.
 */
@AutoConfiguration
@ConditionalOnClass(name = "org.springframework.cloud.gateway.filter.GlobalFilter")
public class PolylbGatewayConfiguration {
    /** Just before ReactiveLoadBalancerClientFilter (10150), so that its chain is inside this one's. */
    static final int ORDER = 10149;

    @Bean
    public GlobalFilter polylbGatewayCancels() {
        return new CancelFilter();
    }

    static final class CancelFilter implements GlobalFilter, Ordered {
        @Override
        public Mono<Void> filter(ServerWebExchange exchange, GatewayFilterChain chain) {
            CancelHooks hooks = new CancelHooks();
            exchange.getAttributes().put(CancelHooks.ATTRIBUTE, hooks);
            return chain.filter(exchange).doOnCancel(hooks::cancelled);
        }

        @Override
        public int getOrder() {
            return ORDER;
        }
    }
}
