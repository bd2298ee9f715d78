package io.polylb.dubbo;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import org.apache.dubbo.common.config.Environment;
import org.apache.dubbo.rpc.model.ScopeModel;

/**
 * The few Dubbo APIs whose name differs between Dubbo 3 lines, resolved once per class load.
 *
 * <p>{@code ScopeModel.modelEnvironment()} exists from Dubbo 3.2 on, where the older
 * {@code getModelEnvironment()} is deprecated (it returns {@code null} instead of throwing);
 * 3.0 and 3.1 have only {@code getModelEnvironment()}. The adapter prefers the first and falls
 * back to the second, so one jar runs on 3.0 through 3.3.
 */
final class DubboCompat {
    static final String MODEL_ENVIRONMENT = "modelEnvironment";
    static final String GET_MODEL_ENVIRONMENT = "getModelEnvironment";

    /** The {@code ScopeModel → Environment} accessor in use, and its name. */
    private static final Accessor ENVIRONMENT = environmentAccessor(MODEL_ENVIRONMENT, GET_MODEL_ENVIRONMENT);

    private DubboCompat() {}

    /**
     * A public no-argument {@code ScopeModel} method returning {@link Environment}, the first of
     * {@code names} that exists (package-private so a test can make the preferred one missing).
     */
    static Accessor environmentAccessor(String... names) {
        MethodHandles.Lookup lookup = MethodHandles.publicLookup();
        MethodType type = MethodType.methodType(Environment.class);
        for (String name : names) {
            try {
                return new Accessor(name, lookup.findVirtual(ScopeModel.class, name, type));
            } catch (NoSuchMethodException | IllegalAccessException e) {
                // an older or newer Dubbo line: try the next name
            }
        }
        throw new IllegalStateException("this Dubbo has none of ScopeModel." + String.join("(), ", names)
                + "(); polylb-dubbo supports Dubbo 3.0 to 3.3");
    }

    /** The scope model's environment ({@code null} where Dubbo's deprecated accessor returns it). */
    static Environment environment(ScopeModel model) {
        return ENVIRONMENT.environment(model);
    }

    /** Which accessor this Dubbo got: {@value #MODEL_ENVIRONMENT} or {@value #GET_MODEL_ENVIRONMENT}. */
    static String environmentAccessorName() {
        return ENVIRONMENT.name;
    }

    record Accessor(String name, MethodHandle handle) {
        Environment environment(ScopeModel model) {
            try {
                return (Environment) handle.invokeExact(model);
            } catch (RuntimeException | Error e) {
                throw e;
            } catch (Throwable e) {
                throw new IllegalStateException(e); // neither method declares a checked exception
            }
        }
    }
}
