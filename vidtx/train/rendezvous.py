"""The workers' process group, listening on the address Ray's node uses and on no other.

Ray Train's torch backend has rank 0 start torch's TCPStore (the rendezvous every rank connects to),
and torch binds that server to every interface (`*:port`): during a local training it was reachable
from the network. `TCPStore(master_listen_fd=...)` serves on a socket the caller bound instead, so
here rank 0 binds one to its Ray node's address (127.0.0.1 for a local Ray, the node's cluster
address on a cluster), serves the store on it for the run, and every rank joins the process group
through it. The collective transport (gloo, NCCL) is pinned to the network interface that holds that
address (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`), unless the user has chosen one.
`tests/test_train.py::test_a_killed_then_stopped_training_job_resumes_each_time_and_listens_on_loopback_only`
notices when a Ray or torch upgrade changes this.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass

import psutil
import ray
import torch.distributed as dist
from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
from ray.train.torch import TorchConfig
from ray.train.torch.config import _set_torch_distributed_env_vars, _TorchBackend

INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_served: list[dist.TCPStore] = []  # rank 0's store, kept alive as long as its worker process


@dataclass
class NodeAddressTorchConfig(TorchConfig):
    """Ray Train's `TorchConfig` whose rendezvous and transport stay on the Ray node's address."""

    @property
    def backend_cls(self) -> type[_TorchBackend]:
        return _NodeAddressTorchBackend


class _NodeAddressTorchBackend(_TorchBackend):
    def on_start(self, worker_group, backend_config: NodeAddressTorchConfig) -> None:  # type: ignore[no-untyped-def]
        gpus = worker_group.get_resources_per_worker().get("GPU", 0)
        backend = backend_config.backend or ("nccl" if gpus > 0 else "gloo")
        address, port = worker_group.execute_single(0, serve_rendezvous_store, backend_config.timeout_s)
        if not isinstance(worker_group, V1WorkerGroup):  # Ray Train V1 sets them at training start
            worker_group.execute(_set_torch_distributed_env_vars)  # RANK, LOCAL_RANK, ... for DeepSpeed
        world_size = len(worker_group)
        ray.get(
            [
                worker_group.execute_single_async(
                    rank,
                    join_process_group,
                    backend,
                    address,
                    port,
                    rank,
                    world_size,
                    backend_config.timeout_s,
                )
                for rank in range(world_size)
            ]
        )


def serve_rendezvous_store(timeout_s: float) -> tuple[str, int]:
    """Start the run's TCPStore in this worker on its Ray node's address: (address, port)."""
    address = ray.util.get_node_ip_address()
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, 0))
    listener.listen()
    port = listener.getsockname()[1]
    store = dist.TCPStore(
        address,
        port,
        is_master=True,
        timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
        multi_tenant=True,
        master_listen_fd=listener.detach(),  # the store owns the socket from here on
    )
    _served.append(store)
    return address, port


def join_process_group(
    backend: str, address: str, port: int, rank: int, world_size: int, timeout_s: float
) -> None:
    """Join the process group through the store at `address:port`; the transport on its interface."""
    interface = interface_of(address)
    if interface is not None:
        for variable in INTERFACE_VARIABLES:
            os.environ.setdefault(variable, interface)
    os.environ.update(MASTER_ADDR=address, MASTER_PORT=str(port))
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(address, port, world_size, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)


def interface_of(address: str) -> str | None:
    """The name of the network interface that holds `address` (`lo` for 127.0.0.1), if any."""
    wanted = ipaddress.ip_address(address)
    for name, addresses in psutil.net_if_addrs().items():
        for entry in addresses:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                candidate = entry.address.split("%", 1)[0]  # fe80::1%eth0
                if ipaddress.ip_address(candidate) == wanted:
                    return name
    return None
