package io.polylb.grpc;

import java.util.Objects;

/**
 * The policy's parsed service-config entry, {@code {"config": "...", "serviceLevel": false}}.
 *
 * @param config       polylb's config string, e.g. {@code "loadbalance=peakewma"}; empty is the
 *                     library's default strategy (Dubbo's {@code random})
 * @param serviceLevel one state for all the channel's methods instead of one per full method name
 */
public record PolylbConfig(String config, boolean serviceLevel) {
    /**
     * The entry.
     *
     * @param config       polylb's config string (empty: the library's defaults)
     * @param serviceLevel one state for all the channel's methods instead of one per full method name
     * @throws NullPointerException if {@code config} is null
     */
    public PolylbConfig {
        Objects.requireNonNull(config, "config");
    }
}
