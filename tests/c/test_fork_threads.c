/*
 * fork() while other threads are inside cold calls (update, method, stats): those take locks
 * that, held at the fork, would stay held for ever in the child, whose next update, method or
 * stats would hang. The library makes a fork wait for the cold calls in flight, so every child
 * can use its copy of the balancer. A hung child is killed by its alarm and fails the test.
 * (Selects and reports are not waited for: those of roundrobin and adaptive may hold a lock of
 * their own for a moment, so the other threads here make cold calls only.)
 */
#define _POSIX_C_SOURCE 200809L /* fork, waitpid, alarm under -std=c11 */

#include "plb_test.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define FORKS 60
#define N 8

static plb_balancer *b;
static atomic_int stop;
static plb_invoker inv[N];
static char addr[N][32];
static const uint64_t IDS[N] = {1, 2, 3, 4, 5, 6, 7, 8};

/* Each thread keeps one kind of cold call going. */
static void *cold_calls(void *arg)
{
    long kind = (long)arg;
    unsigned n = 0;
    while (!atomic_load(&stop)) {
        n++;
        if (kind == 0) {
            plb_balancer_update(b, inv, 4 + n % 5, NULL, 0, NULL);
        } else if (kind == 1) {
            char name[16];
            snprintf(name, sizeof name, "m%u", n % 64);
            uint32_t m;
            plb_balancer_method(b, plbt_u8(name), strlen(name), &m);
        } else {
            free(plbt_stats_json(b, 0));
        }
    }
    return NULL;
}

/* The child: every kind of call must return, and succeed. */
static void child(void)
{
    alarm(10); /* a hang ends the child with SIGALRM */
    int failed = 0;
    for (int i = 0; i < 100; i++) {
        int64_t id = plb_select(b, 0, plbt_u8("key"), 3, 0);
        if (id < 0 || plb_report(b, 0, (uint64_t)id, 10, PLB_OUTCOME_SUCCESS, 0) != PLB_OK)
            failed++;
    }
    uint32_t m;
    if (plb_balancer_method(b, plbt_u8("child"), 5, &m) != PLB_OK)
        failed++;
    if (plb_balancer_update(b, inv, 3, NULL, 0, NULL) != PLB_OK)
        failed++;
    char *json = plbt_stats_json(b, 0);
    if (json == NULL)
        failed++;
    free(json);
    _exit(failed ? 3 : 0);
}

static void run(const char *config)
{
    b = plbt_new(config);
    plbt_invokers(inv, addr, IDS, NULL, N);
    EXPECT_STATUS(plbt_update(b, inv, N), PLB_OK);
    atomic_store(&stop, 0);
    pthread_t threads[3];
    for (long i = 0; i < 3; i++)
        if (pthread_create(&threads[i], NULL, cold_calls, (void *)i) != 0) {
            perror("pthread_create");
            exit(2);
        }
    int hung = 0, failed = 0;
    for (int f = 0; f < FORKS && hung < 3; f++) {
        nanosleep(&(struct timespec){0, 500000}, NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            exit(2);
        }
        if (pid == 0)
            child();
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
            hung++;
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    if (hung || failed)
        plbt_fail(__FILE__, __LINE__, "%s: of %d children, %d hung and %d failed", config, FORKS,
                  hung, failed);
    plb_balancer_free(b);
}

int main(void)
{
    run("loadbalance=random");
    run("loadbalance=roundrobin");
    run("loadbalance=adaptive");
    return plbt_exit_code("test_fork_threads");
}
