package io.polylb.spring;

import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.ConfigurableEnvironment;
import org.springframework.core.env.EnumerablePropertySource;
import org.springframework.core.env.Environment;
import org.springframework.core.env.PropertySource;

/**
 * Checks every polylb setting when the application starts. Spring Cloud builds a client's
 * context, and so its balancer, at the client's first request: without this check a misspelled
 * strategy would surface as that request's error instead of a failed startup.
 */
@AutoConfiguration
@ConditionalOnClass(name = "org.springframework.cloud.loadbalancer.support.LoadBalancerClientFactory")
public class PolylbSettingsValidator {
    private static final Pattern CLIENT_KEY =
            Pattern.compile("spring\\.cloud\\.loadbalancer\\.clients\\.(.+)\\.polylb\\.[a-z-]+");

    @Bean
    public SmartInitializingSingleton polylbSettingsCheck(Environment env) {
        return () -> validate(env);
    }

    static void validate(Environment env) {
        Set<String> clients = new TreeSet<>();
        if (env instanceof ConfigurableEnvironment configurable) {
            for (PropertySource<?> source : configurable.getPropertySources()) {
                if (source instanceof EnumerablePropertySource<?> names) {
                    for (String name : names.getPropertyNames()) {
                        Matcher m = CLIENT_KEY.matcher(name);
                        if (m.matches()) {
                            clients.add(m.group(1));
                        }
                    }
                }
            }
        }
        check(env, null);
        clients.forEach(client -> check(env, client));
    }

    private static void check(Environment env, String serviceId) {
        try (PolylbClient probe = new PolylbClient(serviceId == null ? "(every client)" : serviceId,
                PolylbSettings.of(env, serviceId))) {
            // constructed: valid
        }
    }
}
