package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.core.env.MapPropertySource;
import org.springframework.core.env.StandardEnvironment;

/** The startup check of the settings, without a Boot context. */
class PolylbSettingsTest {
    private static StandardEnvironment env(String... keysAndValues) {
        Map<String, Object> map = new HashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            map.put(keysAndValues[i], keysAndValues[i + 1]);
        }
        StandardEnvironment env = new StandardEnvironment();
        env.getPropertySources().addFirst(new MapPropertySource("test", map));
        return env;
    }

    private static String startupError(String... keysAndValues) {
        return assertThrows(IllegalArgumentException.class,
                () -> PolylbSettingsValidator.validate(env(keysAndValues))).getMessage();
    }

    @Test
    void aMisspeltHashingStrategyIsReportedAsSuchNotAsAUselessHashKey() {
        for (String strategy : new String[] {"rendezvouz", "Rendezvous"}) {
            String message = startupError("spring.cloud.loadbalancer.clients.h.polylb.config", "loadbalance=" + strategy,
                    "spring.cloud.loadbalancer.clients.h.polylb.hash-key", "header:X-User");
            assertTrue(message.contains("spring.cloud.loadbalancer.clients.h.polylb.config")
                    && message.contains("did you mean 'rendezvous'"), message);
        }
        // a valid strategy that hashes nothing still blames the key
        String message = startupError("spring.cloud.loadbalancer.clients.h.polylb.config", "loadbalance=p2c",
                "spring.cloud.loadbalancer.clients.h.polylb.hash-key", "header:X-User");
        assertTrue(message.startsWith("spring.cloud.loadbalancer.clients.h.polylb.hash-key"), message);
    }

    @Test
    void aConfigsZoneWrittenWithBlanksIsStillTheConfigsZone() {
        // polylb trims keys: "zone =" names the zone, and Spring's zone must not be added a second time
        StandardEnvironment env = env("spring.cloud.loadbalancer.clients.h.polylb.config", "loadbalance=p2c&zone =EU-West-1",
                "spring.cloud.loadbalancer.zone", "us-east-1");
        PolylbSettingsValidator.validate(env);
        assertEquals("loadbalance=p2c&zone =eu-west-1", PolylbSettings.of(env, "h").config());
    }
}
