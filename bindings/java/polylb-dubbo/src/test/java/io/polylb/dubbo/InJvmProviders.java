package io.polylb.dubbo;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ProtocolConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Real Dubbo providers inside the test's JVM (dubbo protocol unless told otherwise, e.g. Triple's
 * {@code tri}; hessian2, 127.0.0.1 only, no registry): one per name, each on a free loopback port in its own FrameworkModel and
 * bootstrap, as separate processes would be. A test class registers it as a static
 * {@code @RegisterExtension} field: the providers start before all its tests and are stopped
 * after them; consumers reach them through {@link #directUrls()}.
 */
final class InJvmProviders<T> implements BeforeAllCallback, AfterAllCallback {
    private final String protocolName;
    private final Class<T> service;
    private final String applicationPrefix;
    private final String[] names;
    private final Function<String, ? extends T> implementation;
    private final List<FrameworkModel> frameworks = new ArrayList<>();
    private final List<DubboBootstrap> bootstraps = new ArrayList<>();
    private String directUrls;

    /**
     * Providers of {@code service}, one for each name, serving {@code implementation.apply(name)}
     * under the application name {@code applicationPrefix + name}.
     */
    InJvmProviders(Class<T> service, String applicationPrefix, String[] names,
            Function<String, ? extends T> implementation) {
        this("dubbo", service, applicationPrefix, names, implementation);
    }

    /** The same, served over {@code protocolName} ({@code "dubbo"}, {@code "tri"}). */
    InJvmProviders(String protocolName, Class<T> service, String applicationPrefix, String[] names,
            Function<String, ? extends T> implementation) {
        this.protocolName = protocolName;
        this.service = service;
        this.applicationPrefix = applicationPrefix;
        this.names = names.clone();
        this.implementation = implementation;
    }

    @Override
    public void beforeAll(ExtensionContext context) throws IOException {
        pinDubboLocalHostToLoopback();
        List<String> urls = new ArrayList<>();
        for (String name : names) {
            int port = freeLoopbackPort();
            FrameworkModel framework = new FrameworkModel();
            frameworks.add(framework);
            ProtocolConfig protocol = new ProtocolConfig(protocolName, port);
            protocol.setHost("127.0.0.1");
            protocol.setParameters(Map.of("bind.ip", "127.0.0.1"));
            protocol.setSerialization("hessian2");
            ServiceConfig<T> config = new ServiceConfig<>();
            config.setInterface(service);
            config.setRef(implementation.apply(name));
            config.setRegister(false);
            bootstraps.add(DubboBootstrap.newInstance(framework)
                    .application(application(applicationPrefix + name))
                    .registry(new RegistryConfig("N/A"))
                    .protocol(protocol)
                    .service(config)
                    .start());
            urls.add(protocolName + "://127.0.0.1:" + port + "/" + service.getName());
        }
        directUrls = String.join(";", urls);
    }

    /** The providers' direct URLs, {@code ;}-separated, for {@code ReferenceConfig.setUrl}. */
    String directUrls() {
        return directUrls;
    }

    /**
     * Stops every bootstrap (best effort), then destroys every FrameworkModel. JUnit calls it
     * also when {@link #beforeAll} failed part way, so what did start is stopped.
     */
    @Override
    public void afterAll(ExtensionContext context) {
        for (DubboBootstrap bootstrap : bootstraps) {
            try {
                bootstrap.stop();
            } catch (RuntimeException ignored) {
                // best effort
            }
        }
        for (FrameworkModel framework : frameworks) {
            framework.destroy();
        }
    }

    /** An application with no QoS server (it would listen on 22222) that registers by interface. */
    static ApplicationConfig application(String name) {
        ApplicationConfig app = new ApplicationConfig(name);
        app.setQosEnable(false);
        app.setRegisterMode("interface");
        return app;
    }

    static int freeLoopbackPort() throws IOException {
        try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            return socket.getLocalPort();
        }
    }

    /**
     * Dubbo replaces 127.0.0.1 by the machine's first non-loopback address when it connects
     * (NetUtils.filterLocalHost); pinning its cached local address keeps every byte on loopback.
     * (Dubbo's server still listens on 0.0.0.0: it treats any 127.x bind address as "any host".)
     */
    private static void pinDubboLocalHostToLoopback() {
        try {
            Class<?> netUtils = Class.forName("org.apache.dubbo.common.utils.NetUtils");
            java.lang.reflect.Field hostAddress = netUtils.getDeclaredField("HOST_ADDRESS");
            hostAddress.setAccessible(true);
            hostAddress.set(null, "127.0.0.1");
            java.lang.reflect.Field localAddress = netUtils.getDeclaredField("LOCAL_ADDRESS");
            localAddress.setAccessible(true);
            localAddress.set(null, InetAddress.getByName("127.0.0.1"));
        } catch (ReflectiveOperationException | IOException e) {
            throw new IllegalStateException("cannot keep Dubbo on loopback", e);
        }
    }
}
