package io.polylb.spring;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.springframework.context.ConfigurableApplicationContext;

/** What the end-to-end tests start (local servers, Boot contexts), closed after each test in reverse order. */
abstract class LocalServers {
    private final List<AutoCloseable> closing = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (int i = closing.size() - 1; i >= 0; i--) {
            closing.get(i).close();
        }
    }

    Backend backend(String name, int status, long delayMs) throws Exception {
        Backend b = new Backend(name, status, delayMs);
        closing.add(b);
        return b;
    }

    <T extends AutoCloseable> T closeLater(T resource) {
        closing.add(resource);
        return resource;
    }

    ConfigurableApplicationContext start(String... properties) {
        ConfigurableApplicationContext context = TestApp.start(properties);
        closing.add(context);
        return context;
    }
}
