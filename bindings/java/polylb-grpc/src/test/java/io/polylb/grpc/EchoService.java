package io.polylb.grpc;

import io.grpc.MethodDescriptor;
import io.grpc.MethodDescriptor.MethodType;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** The tests' service, "test.Echo", without protoc: strings as UTF-8 bytes. */
final class EchoService {
    static final String SERVICE = "test.Echo";
    static final MethodDescriptor<String, String> CALL = method("Call", MethodType.UNARY);
    static final MethodDescriptor<String, String> OTHER = method("Other", MethodType.UNARY);
    static final MethodDescriptor<String, String> WATCH = method("Watch", MethodType.SERVER_STREAMING);
    /** Not served: its calls end UNIMPLEMENTED. */
    static final MethodDescriptor<String, String> MISSING = method("Missing", MethodType.UNARY);

    private EchoService() {}

    private static MethodDescriptor<String, String> method(String name, MethodType type) {
        return MethodDescriptor.<String, String>newBuilder()
                .setType(type)
                .setFullMethodName(MethodDescriptor.generateFullMethodName(SERVICE, name))
                .setRequestMarshaller(Utf8.INSTANCE)
                .setResponseMarshaller(Utf8.INSTANCE)
                .build();
    }

    private enum Utf8 implements MethodDescriptor.Marshaller<String> {
        INSTANCE;

        @Override
        public InputStream stream(String value) {
            return new ByteArrayInputStream(value.getBytes(StandardCharsets.UTF_8));
        }

        @Override
        public String parse(InputStream stream) {
            try {
                return new String(stream.readAllBytes(), StandardCharsets.UTF_8);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }
}
