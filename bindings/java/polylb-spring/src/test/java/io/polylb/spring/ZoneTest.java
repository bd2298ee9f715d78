package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.web.client.RestClient;

/** Zones match ignoring case, as in Spring's ZonePreferenceServiceInstanceListSupplier. */
class ZoneTest extends LocalServers {
    private int localHits(String serviceId, String... properties) throws Exception {
        Backend local = backend("local", 200, 0);
        Backend remote1 = backend("remote1", 200, 0);
        Backend remote2 = backend("remote2", 200, 0);
        TestApp.DISCOVERY.put(serviceId, List.of(local.instance(serviceId, Map.of("zone", "eu-West-1A")),
                remote1.instance(serviceId, Map.of("zone", "us-east-1a")),
                remote2.instance(serviceId, Map.of("zone", "US-EAST-1A"))));
        ConfigurableApplicationContext context = start(properties);
        RestClient rest = context.getBean(RestClient.Builder.class).build();
        for (int i = 0; i < 60; i++) {
            rest.get().uri("http://" + serviceId + "/").retrieve().body(String.class);
        }
        return local.hits.get();
    }

    @Test
    void springsZoneSettingMatchesInstanceZonesIgnoringCase() throws Exception {
        // Every instance healthy: a zone match keeps all 60 requests local; a mismatch would
        // leave the choice to p2c over all three (about 20 each).
        assertEquals(60, localHits("zoned", "spring.cloud.loadbalancer.zone=EU-west-1a",
                "spring.cloud.loadbalancer.clients.zoned.polylb.config=loadbalance=p2c&seed=1"));
    }

    @Test
    void theConfigsOwnZoneMatchesIgnoringCase() throws Exception {
        assertEquals(60, localHits("zonedByConfig",
                "spring.cloud.loadbalancer.clients.zonedByConfig.polylb.config=loadbalance=roundrobin&zone=EU-WEST-1A"));
    }
}
