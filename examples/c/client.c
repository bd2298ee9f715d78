/*
 * A minimal polylb client: create a balancer, register the providers, pick one per call,
 * report how each call went, print the stats, free the balancer.
 *
 * Build and run: make -C examples/c run   (see README.md for linking and pkg-config)
 */
#include <polylb.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PROVIDERS 3

static const uint8_t *bytes(const char *s)
{
    return (const uint8_t *)s;
}

int main(void)
{
    char err[256];
    size_t err_len = 0;

    /* 1. Create: the config is Dubbo URL parameters; a misspelled key is an error. */
    const char *config = "loadbalance=leastactive";
    plb_balancer *lb = NULL;
    if (plb_balancer_new(bytes(config), strlen(config), &lb, err, sizeof err, &err_len) !=
        PLB_OK) {
        fprintf(stderr, "plb_balancer_new: %s\n", err);
        return 1;
    }

    /* 2. Register the providers (the library copies them; ids are yours). */
    static const char *const addresses[N_PROVIDERS] = {"10.0.0.1:20880", "10.0.0.2:20880",
                                                       "10.0.0.3:20880"};
    plb_invoker providers[N_PROVIDERS];
    for (int i = 0; i < N_PROVIDERS; i++) {
        providers[i] = (plb_invoker){
            .id = (uint64_t)(i + 1),
            .address = bytes(addresses[i]),
            .address_len = strlen(addresses[i]),
            .weight = 100,
            .start_time_ms = 0, /* unknown: no warm-up */
            .warmup_ms = -1,    /* the balancer's default */
            .zone = NULL,
            .zone_len = 0,
        };
    }
    if (plb_balancer_update(lb, providers, N_PROVIDERS, err, sizeof err, &err_len) != PLB_OK) {
        fprintf(stderr, "plb_balancer_update: %s\n", err);
        plb_balancer_free(lb);
        return 1;
    }

    /* 3. Intern the method name once; use the id on every call. */
    uint32_t say_hello = 0;
    if (plb_balancer_method(lb, bytes("sayHello"), strlen("sayHello"), &say_hello) != PLB_OK) {
        plb_balancer_free(lb);
        return 1;
    }

    /* 4. Per call: select, make the call, report. now_us = 0 means the library's clock. */
    for (int call = 0; call < 6; call++) {
        int64_t id = plb_select(lb, say_hello, NULL, 0, 0);
        if (id < 0) {
            fprintf(stderr, "plb_select: %s\n", plb_status_str((int32_t)id));
            break;
        }
        /* ... send the RPC to addresses[id - 1] here; say every third call fails ... */
        int failed = call % 3 == 2;
        plb_report(lb, say_hello, (uint64_t)id, 1200 + 100 * call,
                   failed ? PLB_OUTCOME_FAILURE : PLB_OUTCOME_SUCCESS, 0);
        printf("call %d -> provider %" PRId64 "%s\n", call, id, failed ? " (failed)" : "");

        if (failed) {
            /* Failover: retry once on any other provider. */
            const uint64_t tried[1] = {(uint64_t)id};
            int64_t retry = plb_select_among(lb, say_hello, NULL, 0, NULL, 0, tried, 1, 0);
            if (retry >= 0) {
                plb_report(lb, say_hello, (uint64_t)retry, 900, PLB_OUTCOME_SUCCESS, 0);
                printf("        retried on provider %" PRId64 "\n", retry);
            }
        }
    }

    /* 5. Stats: ask for the length, then allocate it plus the NUL. */
    size_t len = 0;
    if (plb_balancer_stats(lb, 0, NULL, 0, &len) == PLB_ERR_BUFFER_TOO_SMALL) {
        char *json = malloc(len + 1);
        if (json != NULL && plb_balancer_stats(lb, 0, json, len + 1, &len) == PLB_OK)
            printf("%s\n", json);
        free(json);
    }

    /* 6. Free, once, after every other call has returned. */
    plb_balancer_free(lb);
    return 0;
}
