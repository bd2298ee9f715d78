package io.polylb.dubbo;

import java.io.Serializable;

/** The service the serialization tests' providers export: plain Java types (hessian2; over Triple, wrapped). */
public interface PayloadService {
    /** The provider's name; {@code payload} is taken and dropped. */
    String take(String callId, Object payload);

    /** The same, for an argument declared {@link Unreadable} (so on every side's allow list). */
    String takeUnreadable(String callId, Unreadable payload);

    /** Answers with a value of a class that is not Serializable. */
    Object giveUnserializable(String callId);

    /** Serializable, but its deserialization throws (hessian calls {@code readResolve}). */
    final class Unreadable implements Serializable {
        private static final long serialVersionUID = 1L;
        int value = 1;

        private Object readResolve() {
            throw new IllegalStateException("an Unreadable cannot be read here");
        }
    }
}
