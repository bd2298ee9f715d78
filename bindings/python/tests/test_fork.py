"""os.fork() after the balancer was used, as a pre-forking server does (gunicorn with
--preload, celery's prefork pool, multiprocessing's fork start method): each child goes on with
its copy of the balancer, and must draw its own random numbers, not its siblings'."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings
from typing import List

import pytest

import polylb
from conftest import invokers
from polylb import Outcome

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")

PICKS = 64


def _picks(lb: polylb.Balancer) -> List[int]:
    ids = []
    for _ in range(PICKS):
        with lb.call() as call:
            ids.append(call.id)
    return ids


def _in_child(lb: polylb.Balancer) -> List[int]:
    """The child's picks; the child also reads stats, updates and closes its copy."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 1
        try:
            os.close(read_end)
            ids = _picks(lb)
            lb.stats()
            lb.update(invokers(9))
            lb.close()
            os.write(write_end, " ".join(map(str, ids)).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    data = b""
    while True:
        chunk = os.read(read_end, 4096)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return [int(i) for i in data.split()]


@pytest.mark.parametrize("strategy", ["random", "p2c", "leastactive"])
def test_children_of_a_fork_draw_apart(strategy: str) -> None:
    lb = polylb.Balancer(strategy)
    lb.update(invokers(10))
    _picks(lb)  # the parent's thread has its random state now
    children = [_in_child(lb) for _ in range(3)]
    assert all(len(ids) == PICKS for ids in children)
    assert children[0] != children[1] and children[0] != children[2] and children[1] != children[2], (
        f"{strategy}: the children picked the same invokers in the same order"
    )
    # The parent goes on with its own copy, untouched by its children's calls.
    assert _picks(lb) not in children
    assert all(row["active"] == 0 for row in lb.stats()["invokers"])
    assert [row["id"] for row in lb.stats()["invokers"]] == list(range(1, 11))
    lb.close()


def test_a_fork_during_updates_in_another_thread_leaves_the_child_a_usable_balancer() -> None:
    # A registry watcher updating the set in the background while the server forks its workers:
    # a lock that thread held at the fork (the binding's, or the library's) would stay held for
    # ever in the child, whose update() and close() would then hang.
    lb = polylb.Balancer("roundrobin")
    lb.update(invokers(8))
    stop = threading.Event()

    def watcher() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            lb.update(invokers(4 + n % 5))
            lb.method(f"m{n % 32}")
            lb.stats()

    thread = threading.Thread(target=watcher)
    thread.start()
    try:
        with warnings.catch_warnings():
            # Python 3.12 warns about forking a process that has threads; that is the point here.
            warnings.simplefilter("ignore", DeprecationWarning)
            for _ in range(40):
                time.sleep(0.001)
                pid = os.fork()
                if pid == 0:  # pragma: no cover - runs in the child
                    signal.alarm(10)  # a hang ends the child with SIGALRM
                    status = 1
                    try:
                        lb.update(invokers(3))
                        lb.method("child")
                        assert [row["id"] for row in lb.stats()["invokers"]] == [1, 2, 3]
                        with lb.call() as call:
                            assert call.id in (1, 2, 3)
                        lb.close()
                        status = 0
                    finally:
                        os._exit(status)
                _, status = os.waitpid(pid, 0)
                assert not os.WIFSIGNALED(status), "the child hung (killed by its alarm)"
                assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        stop.set()
        thread.join()
    lb.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
