package io.polylb.grpc;

import java.util.Objects;

/**
 * The policy's parsed service-config entry, {@code {"config": "...", "serviceLevel": false,
 * "enableOobLoadReport": false, "oobReportingPeriod": "10s"}}.
 *
 * @param config                   polylb's config string, e.g. {@code "loadbalance=peakewma"};
 *                                 empty is the library's default strategy (Dubbo's {@code random})
 * @param serviceLevel             one state for all the channel's methods instead of one per full
 *                                 method name
 * @param enableOobLoadReport      with {@code loadbalance=orca}: read the endpoints' load from
 *                                 ORCA's out-of-band stream ({@code StreamCoreMetrics}) instead of
 *                                 the calls' trailers, as gRPC's {@code weighted_round_robin} does
 *                                 with its {@code enableOobLoadReport}; ignored by the other
 *                                 strategies
 * @param oobReportingPeriodNanos  the report interval the out-of-band stream asks for; 0 asks for
 *                                 none (the server's own minimum)
 */
public record PolylbConfig(String config, boolean serviceLevel, boolean enableOobLoadReport,
        long oobReportingPeriodNanos) {
    /** gRFC A58's default {@code oobReportingPeriod}, 10 s. */
    public static final long DEFAULT_OOB_REPORTING_PERIOD_NANOS = 10_000_000_000L;

    /**
     * The entry.
     *
     * @param config                  polylb's config string (empty: the library's defaults)
     * @param serviceLevel            one state for all the channel's methods instead of one per
     *                                full method name
     * @param enableOobLoadReport     read ORCA's out-of-band reports for {@code orca}
     * @param oobReportingPeriodNanos the report interval asked for, {@code >= 0}
     * @throws NullPointerException     if {@code config} is null
     * @throws IllegalArgumentException if {@code oobReportingPeriodNanos} is negative
     */
    public PolylbConfig {
        Objects.requireNonNull(config, "config");
        if (oobReportingPeriodNanos < 0) {
            throw new IllegalArgumentException("oobReportingPeriodNanos = " + oobReportingPeriodNanos + " (want >= 0)");
        }
    }

    /**
     * The entry without out-of-band load reports.
     *
     * @param config       polylb's config string (empty: the library's defaults)
     * @param serviceLevel one state for all the channel's methods instead of one per full method name
     * @throws NullPointerException if {@code config} is null
     */
    public PolylbConfig(String config, boolean serviceLevel) {
        this(config, serviceLevel, false, DEFAULT_OOB_REPORTING_PERIOD_NANOS);
    }
}
