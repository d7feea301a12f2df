#!/usr/bin/env python3
"""A TCP proxy that adds a fixed delay to every byte in each direction, as a network with that
round trip would: the benchmark's round-trip knob, in front of pve-sim and independent of its
code (TLS passes through untouched, so clients see pve-sim's own certificate).

Each direction is a pipe with latency and no bandwidth limit: what arrives at time t is written
at t + delay, in order. `--rtt 40ms` delays each direction by 20 ms, so a request and its answer
take 40 ms more than on loopback, and the client sees its answer one round trip after asking.
A connection is accepted at once (a userspace proxy cannot delay the kernel's handshake); its
first bytes, TLS's hello, pay the delay like any others.

Usage: delay_proxy.py --listen 127.0.0.1:0 --upstream 127.0.0.1:8006 --rtt 40ms
On start it prints one JSON line: {"port": N}. It runs until killed (SIGTERM).
"""
import argparse
import asyncio
import json
import re
import signal
import sys


def duration(text):
    """Seconds from `40ms`, `0.5s`, `1s` or a plain number of milliseconds."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--rtt: '{text}' is not a duration (e.g. 40ms, 0.1s)")
    value = float(m.group(1))
    return value / 1000 if m.group(2) in (None, "ms") else value


async def pipe(reader, writer, delay):
    """Copies reader to writer, each chunk written `delay` seconds after it was read."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def read():
        try:
            while True:
                chunk = await reader.read(65536)
                queue.put_nowait((loop.time() + delay, chunk))
                if not chunk:
                    return
        except (ConnectionError, OSError):
            queue.put_nowait((loop.time() + delay, b""))

    async def write():
        try:
            while True:
                due, chunk = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            return

    await asyncio.gather(read(), write())


async def serve(listen_host, listen_port, up_host, up_port, one_way):
    async def handle(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(up_host, up_port)
        except OSError:
            client_writer.close()
            return
        try:
            await asyncio.gather(pipe(client_reader, up_writer, one_way),
                                 pipe(up_reader, client_writer, one_way))
        except asyncio.CancelledError:
            pass  # the proxy is stopping
        finally:
            for w in (up_writer, client_writer):
                w.close()

    server = await asyncio.start_server(handle, listen_host, listen_port)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main():
    ap = argparse.ArgumentParser(description="a TCP proxy adding a fixed round trip")
    ap.add_argument("--listen", default="127.0.0.1:0", help="address to listen on (port 0: any free one)")
    ap.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--rtt", type=duration, required=True, help="round trip to add, half each way (e.g. 40ms)")
    args = ap.parse_args()
    lh, lp = args.listen.rsplit(":", 1)
    uh, up = args.upstream.rsplit(":", 1)
    try:
        asyncio.run(serve(lh, int(lp), uh, int(up), args.rtt / 2))
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
