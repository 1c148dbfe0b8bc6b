"""What a tree of processes listens on, read from /proc: for the tests that nothing of vidtx is
reachable from the network.

Imported as `from sockets import ...` (tests/ is on sys.path under pytest, see media.py).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from pathlib import Path

# /proc/net tables: TCP sockets in state 0A (LISTEN); UDP sockets bound and not connected (state 07,
# remote port 0), which take datagrams from anyone
TABLES = {"tcp": "0A", "tcp6": "0A", "udp": "07", "udp6": "07"}


def process_tree(root: int) -> set[int]:
    """`root` and every process below it."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):  # not a process, or one that ended
            # /proc/<pid>/stat: "pid (name) state ppid ...", the name may hold spaces and ")"
            parent_of[int(entry.name)] = int(entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = {pid for pid, ppid in parent_of.items() if ppid == parent} - tree
        tree |= children
        frontier.extend(children)
    return tree


def _address(hex_ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    # the kernel prints the address as 32-bit words in host (little-endian) order
    words = [bytes.fromhex(hex_ip[i : i + 8])[::-1] for i in range(0, len(hex_ip), 8)]
    address = ipaddress.ip_address(b"".join(words))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped  # ::ffff:127.0.0.1
    return address


def listening_sockets(pids: set[int]) -> dict[str, list[str]]:
    """{"tcp 127.0.0.1:6379": [process names]} of what these processes listen on (TCP, UDP)."""
    owner: dict[str, str] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        owner[target.removeprefix("socket:[").removesuffix("]")] = name
    listening: dict[str, list[str]] = {}
    for table, state in TABLES.items():
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            columns = row.split()
            (hex_ip, hex_port), remote_port, inode = (
                columns[1].split(":"),
                columns[2].split(":")[1],
                columns[9],
            )
            if columns[3] == state and int(remote_port, 16) == 0 and inode in owner:
                address = _address(hex_ip)
                where = f"[{address}]" if address.version == 6 else str(address)
                listening.setdefault(f"{table.rstrip('6')} {where}:{int(hex_port, 16)}", []).append(
                    owner[inode]
                )
    return listening


def exposed(listening: dict[str, list[str]]) -> dict[str, list[str]]:
    """The entries of `listening_sockets` reachable from beyond this machine (not on loopback)."""
    return {
        where: names
        for where, names in listening.items()
        if not ipaddress.ip_address(where.split()[1].rsplit(":", 1)[0].strip("[]")).is_loopback
    }
