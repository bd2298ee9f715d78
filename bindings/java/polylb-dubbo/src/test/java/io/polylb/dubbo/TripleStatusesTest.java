package io.polylb.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Method;
import java.util.concurrent.CompletionException;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.StatusRpcException;
import org.apache.dubbo.rpc.TriRpcStatus;
import org.junit.jupiter.api.Test;

/** How Triple's statuses are told apart (TripleOutcomesTest runs them end to end). */
class TripleStatusesTest {
    static final URL TRI = URL.valueOf("tri://127.0.0.1:50051/com.example.DemoService");
    static final URL DUBBO = URL.valueOf("dubbo://127.0.0.1:20880/com.example.DemoService");

    @Test
    void statusesAreToldApart() {
        StatusRpcException cancelled = TriRpcStatus.CANCELLED.asException();
        StatusRpcException deadline = TriRpcStatus.DEADLINE_EXCEEDED.withDescription("late").asException();
        StatusRpcException unavailable = TriRpcStatus.UNAVAILABLE.asException();
        // Dubbo gives CANCELLED the generic code: only the status says it is a cancel.
        assertEquals(RpcException.UNKNOWN_EXCEPTION, cancelled.getCode());
        assertTrue(PolylbInvokerFilter.isCancellation(cancelled));
        assertTrue(PolylbInvokerFilter.isCancellation(new CompletionException(cancelled)));
        assertFalse(PolylbInvokerFilter.isTimeout(cancelled));
        assertTrue(deadline.isTimeout());
        assertTrue(PolylbInvokerFilter.isTimeout(deadline));
        assertFalse(PolylbInvokerFilter.isCancellation(deadline));
        assertFalse(PolylbInvokerFilter.isCancellation(unavailable));
        assertFalse(PolylbInvokerFilter.isTimeout(unavailable));
    }

    @Test
    void onlyTriplesOwnStatusOfATripleCallIsAnError() {
        StatusRpcException status = TriRpcStatus.UNAVAILABLE.asException();
        assertTrue(TripleStatuses.isCallStatus(status, TRI));
        assertTrue(TripleStatuses.isCallStatus(status, TRI.setProtocol("grpc")));
        // Over the dubbo protocol it is what the provider threw: its answer.
        assertFalse(TripleStatuses.isCallStatus(status, DUBBO));
        // A business exception comes back over Triple as itself.
        assertFalse(TripleStatuses.isCallStatus(new IllegalArgumentException(), TRI));
        assertFalse(TripleStatuses.isCallStatus(new RpcException(RpcException.TIMEOUT_EXCEPTION, "t"), TRI));
        assertFalse(TripleStatuses.isCallStatus(null, TRI));
    }

    @Test
    void worksWithoutTriplesClasses() throws Exception {
        // Modular Dubbo ships StatusRpcException and TriRpcStatus in the optional
        // dubbo-rpc-triple: without them, TripleStatuses loads, links and answers "no".
        ClassLoader loader = new WithoutTriple(getClass().getClassLoader());
        assertThrows(ClassNotFoundException.class, () -> loader.loadClass(StatusRpcException.class.getName()));
        Class<?> statuses = loader.loadClass(TripleStatuses.class.getName());
        assertEquals(loader, statuses.getClassLoader());
        Method isCancelled = statuses.getDeclaredMethod("isCancelled", Throwable.class);
        Method isCallStatus = statuses.getDeclaredMethod("isCallStatus", Throwable.class, URL.class);
        isCancelled.setAccessible(true);
        isCallStatus.setAccessible(true);
        assertEquals(false, isCancelled.invoke(null, new RpcException("boom")));
        assertEquals(false, isCallStatus.invoke(null, new RpcException("boom"), TRI));
    }

    /** Loads TripleStatuses itself, hides Triple's status classes, delegates the rest. */
    static final class WithoutTriple extends ClassLoader {
        WithoutTriple(ClassLoader parent) {
            super(parent);
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            synchronized (getClassLoadingLock(name)) {
                if (name.startsWith(StatusRpcException.class.getName())
                        || name.startsWith(TriRpcStatus.class.getName())) {
                    throw new ClassNotFoundException(name);
                }
                if (!name.equals(TripleStatuses.class.getName())) {
                    return super.loadClass(name, resolve);
                }
                Class<?> c = findLoadedClass(name);
                if (c == null) {
                    String resource = name.replace('.', '/') + ".class";
                    try (InputStream in = getParent().getResourceAsStream(resource)) {
                        byte[] bytes = in.readAllBytes();
                        c = defineClass(name, bytes, 0, bytes.length);
                    } catch (IOException e) {
                        throw new ClassNotFoundException(name, e);
                    }
                }
                if (resolve) {
                    resolveClass(c);
                }
                return c;
            }
        }
    }
}
