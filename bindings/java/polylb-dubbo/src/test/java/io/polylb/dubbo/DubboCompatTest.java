package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import org.apache.dubbo.common.config.Environment;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.apache.dubbo.rpc.model.ScopeModel;
import org.junit.jupiter.api.Test;

/**
 * The environment accessor differs between Dubbo lines (modelEnvironment() from 3.2,
 * getModelEnvironment() only in 3.0 and 3.1). On 3.3 the preferred one is used; the fallback is
 * exercised here by asking for a method that does not exist first.
 */
class DubboCompatTest {
    private static boolean scopeModelDeclares(String name) {
        return Arrays.stream(ScopeModel.class.getMethods()).anyMatch(m -> m.getName().equals(name));
    }

    @Test
    void thePreferredAccessorIsUsedWhereItExists() {
        String expected = scopeModelDeclares(DubboCompat.MODEL_ENVIRONMENT)
                ? DubboCompat.MODEL_ENVIRONMENT : DubboCompat.GET_MODEL_ENVIRONMENT;
        assertEquals(expected, DubboCompat.environmentAccessorName());
    }

    @Test
    void theFallbackReadsTheSameEnvironment() {
        FrameworkModel framework = new FrameworkModel();
        try {
            ApplicationModel app = framework.newApplication();
            Environment used = DubboCompat.environment(app);
            DubboCompat.Accessor fallback = DubboCompat.environmentAccessor(
                    "modelEnvironmentOfAnotherDubbo", DubboCompat.GET_MODEL_ENVIRONMENT);
            assertEquals(DubboCompat.GET_MODEL_ENVIRONMENT, fallback.name());
            assertNotNull(used);
            assertSame(used, fallback.environment(app));
            // And it reads the application configuration as the adapter does.
            String key = "polylb.test.compat." + System.nanoTime();
            System.setProperty(key, "1234");
            try {
                assertEquals(1234, fallback.environment(app).getConfiguration().getInt(key, 0));
            } finally {
                System.clearProperty(key);
            }
        } finally {
            framework.destroy();
        }
    }

    @Test
    void noAccessorAtAllIsAClearError() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> DubboCompat.environmentAccessor("noSuchA", "noSuchB"));
        assertTrue(e.getMessage().contains("noSuchA()") && e.getMessage().contains("noSuchB()"), e.getMessage());
    }
}
