package io.polylb.dubbo;

/** The service the end-to-end test's providers export. */
public interface EchoService {
    /** Returns the provider's name after {@code delayMs} (the slow provider adds its own delay). */
    String work(String callId, int delayMs);

    /** Sleeps {@code sleepMs} when the provider is named {@code slowProvider}, then returns its name. */
    String slowOn(String slowProvider, String callId, int sleepMs);
}
