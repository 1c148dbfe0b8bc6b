"""A TCP proxy that holds every HTTP request back for a fixed time: a bucket with a cloud's latency in
front of the local S3 server, for the tests and benchmarks of reading from a bucket.

The local server answers in microseconds, so it shows neither what a loader loses waiting on a
bucket 20-50 ms away (as a cloud bucket in the same region is, to its first byte) nor what fetching
ahead wins back. This proxy forwards bytes both ways unchanged and waits `delay` seconds before
forwarding each request: the first bytes a client sends after the previous response began (or on a
new connection). What it cannot show: bandwidth limits and their variation (loopback is not a
network), a cloud's per-prefix request rates, throttling (503 SlowDown), and the tail of a real
bucket's latency (every request here waits the same); and the S3 server behind it still caps the
request rate with its own CPU, so the benchmarks pin it to a core of its own and report that CPU.

With `log`, it writes the request line of each request it forwards (`METHOD /bucket/key?query`), as
it forwards it, to that file: the tests' and benchmarks' count of what a loader asked of the bucket
(`requests` reads it), SeaweedFS having no request log of its own. At no delay it is a recorder.

With `stall_after`, the first answered request whose request line holds that text
(`.stats.json?uploadId=`: the request that completes a shard's marker) is the last: every later one
waits for ever, as on a lost network, so that a test stops a job part-way at a point of its choosing
rather than racing it.

`python -m infra.local.latency_proxy LISTEN_PORT UPSTREAM_PORT DELAY_MS [--stall-after TEXT] [--log FILE]`
runs one in the foreground.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from infra.local.processes import wait_for_port

CHUNK = 1 << 18
REQUEST_LINE = re.compile(rb"[A-Z]+ \S+ HTTP/1\.[01]\r\n")


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, before: Callable[[bytes], Awaitable[None]]
) -> None:
    try:
        while data := await reader.read(CHUNK):
            await before(data)
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _serve(
    listen_port: int, upstream_port: int, delay: float, stall_after: bytes | None, log: Path | None
) -> None:
    record = log.open("ab", buffering=0) if log else None  # unbuffered: read as soon as forwarded
    stalled = asyncio.Event()  # set once the request named by `stall_after` has been answered

    async def connection(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:  # the server is down: the client's connection is refused with it
            client_writer.close()
            return
        awaiting_request = True  # the next bytes from the client begin a request
        last_request = False  # the request being answered is the one `stall_after` names

        async def request_bytes(data: bytes) -> None:
            nonlocal awaiting_request, last_request
            if awaiting_request:
                awaiting_request = False
                if stalled.is_set():
                    await asyncio.Future()  # never: the network is gone
                if REQUEST_LINE.match(data):  # not the body that a "100 Continue" let come
                    request_line = data.split(b"\r\n", 1)[0]
                    last_request = stall_after is not None and stall_after in request_line
                    if record:
                        record.write(request_line.rsplit(b" ", 1)[0] + b"\n")
                await asyncio.sleep(delay)

        async def response_bytes(data: bytes) -> None:
            nonlocal awaiting_request
            awaiting_request = True
            if last_request and not data.startswith(b"HTTP/1.1 100 "):  # its answer, not "go on"
                stalled.set()

        await asyncio.gather(
            _pipe(client_reader, upstream_writer, request_bytes),
            _pipe(upstream_reader, client_writer, response_bytes),
        )

    server = await asyncio.start_server(connection, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def latency_proxy(
    listen_port: int,
    upstream_port: int,
    delay_ms: float,
    stall_after: str | None = None,
    log: Path | None = None,
) -> Iterator[str]:
    """The proxy on 127.0.0.1:`listen_port` for the block, in a process of its own (its CPU is not
    the measured process's); yields its endpoint URL."""
    command = [sys.executable, "-m", "infra.local.latency_proxy", str(listen_port), str(upstream_port)]
    command += [str(delay_ms), f"--stall-after={stall_after or ''}", f"--log={log or ''}"]
    proxy = subprocess.Popen(command)
    try:
        wait_for_port(listen_port, proxy, "the latency proxy", timeout=30)
        yield f"http://127.0.0.1:{listen_port}"
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)


def requests(log: Path, since: int = 0) -> list[str]:
    """'METHOD /bucket/key?query' of each request the proxy logged after byte `since` of its log."""
    return log.read_bytes()[since:].decode(errors="replace").splitlines()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="an HTTP proxy that delays, records or stalls requests")
    parser.add_argument("listen_port", type=int)
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("delay_ms", type=float)
    parser.add_argument("--stall-after", default="", help="text of the last request line answered")
    parser.add_argument("--log", default="", help="file that each request line is appended to")
    arguments = parser.parse_args()
    stall = arguments.stall_after.encode() or None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            _serve(
                arguments.listen_port,
                arguments.upstream_port,
                arguments.delay_ms / 1000,
                stall,
                Path(arguments.log) if arguments.log else None,
            )
        )
