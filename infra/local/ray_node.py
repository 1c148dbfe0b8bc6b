"""`ray start` for a node of a Ray cluster whose nodes all run on this machine, every server of it on
127.0.0.1: `python -m infra.local.ray_node start --node-ip-address=127.0.0.1 ...` takes `ray start`'s
arguments (`make stack`'s two nodes, the tests' and benchmarks' clusters of `benchmarks/ray_nodes.py`).

Ray turns a node address of 127.0.0.1 (`--node-ip-address`, and the head's address in `--address`)
into the machine's network address (Ray 2.60: `services.resolve_ip_for_localhost`), since the nodes
of a cluster usually sit on different machines. The GCS, raylet, object manager, dashboard and
runtime-env agents, metrics exporters and Ray workers then listen on that address or on every
interface, reachable from the network, metrics endpoints answering anyone. Nodes on one machine
reach one another on loopback, so here:

- the `ray start` process keeps both addresses as given;
- what the node starts (agents, Ray workers, Ray Jobs' drivers, which join the cluster at the
  loopback address in RAY_ADDRESS) runs with Ray's switch for a loopback-only Ray,
  `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, under which Ray keeps 127.0.0.1 as it is. (The switch cannot
  be given to `ray start` itself: it also refuses to start a second node.)

A driver outside the nodes joins such a cluster through `vidtx.ray_session`, which keeps a loopback
address as well. `tests/test_stack.py` notices when a Ray upgrade changes this: it fails on any socket
of the stack that listens beyond loopback.
"""

from __future__ import annotations

import os
import sys

from ray._private import ray_constants, services
from ray.scripts.scripts import main


def _as_given(host: str) -> str:
    return host


if __name__ == "__main__":
    services.resolve_ip_for_localhost = _as_given
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"  # for the node's processes
    sys.argv[0] = "ray"
    main()
