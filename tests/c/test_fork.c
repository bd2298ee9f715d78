/*
 * fork() after the library was used (a pre-forking server: gunicorn, celery, an Apache module):
 * each child must draw its own random numbers. The calling thread's random state is copied into
 * every child, so without a reseed at fork the children of one parent pick the same invokers in
 * the same order (each child's calls then land together on one provider). The children must
 * also be able to use, update and free the balancer, and the parent to go on with it.
 */
#define _POSIX_C_SOURCE 200809L /* fork, pipe, waitpid under -std=c11 */

#include "plb_test.h"

#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN 3
#define PICKS 64
#define N 10

static const uint64_t IDS[N] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

/* Selects PICKS times; the ids into `out`. Returns the number of failed calls. */
static int picks(const plb_balancer *b, int64_t *out)
{
    int failed = 0;
    for (int i = 0; i < PICKS; i++) {
        out[i] = plb_select(b, 0, NULL, 0, PLBT_T0_US);
        if (out[i] < 0 || plb_report(b, 0, (uint64_t)out[i], 10, PLB_OUTCOME_SUCCESS, PLBT_T0_US))
            failed++;
    }
    return failed;
}

/* The child: picks, writes them to `fd`, then updates, reads stats and frees the balancer. */
static void child(plb_balancer *b, int fd)
{
    int64_t ids[PICKS];
    int failed = picks(b, ids);
    plb_invoker inv[N];
    char addr[N][32];
    plbt_invokers(inv, addr, IDS, NULL, N - 1);
    if (plb_balancer_update(b, inv, N - 1, NULL, 0, NULL) != PLB_OK)
        failed++;
    char *json = plbt_stats_json(b, PLBT_T0_US);
    if (json == NULL)
        failed++;
    free(json);
    plb_balancer_free(b);
    if (write(fd, ids, sizeof ids) != (ssize_t)sizeof ids)
        failed++;
    _exit(failed ? 3 : 0);
}

static void run(const char *config)
{
    plb_balancer *b = plbt_new(config);
    plb_invoker inv[N];
    char addr[N][32];
    plbt_invokers(inv, addr, IDS, NULL, N);
    EXPECT_STATUS(plbt_update(b, inv, N), PLB_OK);
    int64_t before[PICKS];
    EXPECT_EQ(picks(b, before), 0); /* seeds this thread's random state */

    int64_t seen[CHILDREN][PICKS];
    for (int c = 0; c < CHILDREN; c++) {
        int fds[2];
        if (pipe(fds) != 0) {
            perror("pipe");
            exit(2);
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            exit(2);
        }
        if (pid == 0) {
            close(fds[0]);
            child(b, fds[1]);
        }
        close(fds[1]);
        size_t got = 0;
        while (got < sizeof seen[c]) {
            ssize_t r = read(fds[0], (char *)seen[c] + got, sizeof seen[c] - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        EXPECT_EQ(got, sizeof seen[c]);
    }
    for (int c = 1; c < CHILDREN; c++)
        if (memcmp(seen[0], seen[c], sizeof seen[0]) == 0)
            plbt_fail(__FILE__, __LINE__, "%s: children 0 and %d picked the same %d invokers in "
                      "the same order", config, c, PICKS);

    /* The parent goes on with its balancer, and draws apart from its children too. */
    int64_t after[PICKS];
    EXPECT_EQ(picks(b, after), 0);
    for (int c = 0; c < CHILDREN; c++)
        if (memcmp(after, seen[c], sizeof after) == 0)
            plbt_fail(__FILE__, __LINE__, "%s: the parent repeated child %d's picks", config, c);
    plbt_expect_idle(b, config);
    plb_balancer_free(b);
}

int main(void)
{
    run("loadbalance=random");
    run("loadbalance=p2c");
    run("loadbalance=leastactive");
    return plbt_exit_code("test_fork");
}
