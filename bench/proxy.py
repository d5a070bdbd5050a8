#!/usr/bin/python3
"""Latency proxy for the feedfs benchmark: a streaming TCP relay on 127.0.0.1.

    proxy.py --listen PORT --upstream PORT --latency-ms 20 [--bw-mbps 0]

Every HTTP request's response is held back so that its first byte reaches the
client no sooner than LATENCY_MS after the request's first byte arrived (the
round trip of a distant object store); the rest of the response streams on
without buffering. With --bw-mbps N each connection's downstream is capped at
N MB/s (10^6 bytes/s) by a token bucket. HTTP/1.1 keep-alive is supported
(one request in flight per connection, as every client here does); pipelined
requests would be delayed only once. Only ever binds and connects to 127.0.0.1.
"""
import argparse
import asyncio
import signal
import sys
import time

HOST = "127.0.0.1"
CHUNK = 256 * 1024


class Conn:
    __slots__ = ("req_t", "pending")

    def __init__(self):
        self.req_t = 0.0
        self.pending = False


async def upstream_to_client(reader, writer, st, delay, bw):
    budget_t = time.monotonic()
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            if st.pending:
                wait = st.req_t + delay - time.monotonic()
                st.pending = False
                if wait > 0:
                    await asyncio.sleep(wait)
                budget_t = time.monotonic()
            if bw > 0:
                # token bucket: this chunk may leave no earlier than budget_t
                now = time.monotonic()
                if budget_t < now - 0.05:
                    budget_t = now - 0.05
                budget_t += len(data) / bw
                if budget_t > now:
                    await asyncio.sleep(budget_t - now)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def client_to_upstream(reader, writer, st):
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            if not st.pending:
                st.pending = True
                st.req_t = time.monotonic()
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError, OSError):
        pass
    finally:
        try:
            writer.write_eof()
        except Exception:
            pass


async def handle(creader, cwriter, args):
    try:
        ureader, uwriter = await asyncio.open_connection(HOST, args.upstream)
    except OSError:
        cwriter.close()
        return
    st = Conn()
    delay = args.latency_ms / 1000.0
    bw = args.bw_mbps * 1e6
    t1 = asyncio.ensure_future(client_to_upstream(creader, uwriter, st))
    t2 = asyncio.ensure_future(upstream_to_client(ureader, cwriter, st, delay, bw))
    await asyncio.wait([t1, t2], return_when=asyncio.FIRST_COMPLETED)
    if t2.done():
        t1.cancel()
    await asyncio.gather(t1, t2, return_exceptions=True)
    for w in (uwriter, cwriter):
        try:
            w.close()
        except Exception:
            pass


async def main(args):
    server = await asyncio.start_server(lambda r, w: handle(r, w, args), HOST, args.listen,
                                        backlog=512, reuse_address=True)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, lambda: stop.done() or stop.set_result(None))
    print("proxy listening on %s:%d -> %d, latency %g ms, bw %g MB/s" %
          (HOST, args.listen, args.upstream, args.latency_ms, args.bw_mbps), flush=True)
    async with server:
        await stop


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", type=int, required=True)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--bw-mbps", type=float, default=0.0, help="per-connection cap, 0 = none")
    a = ap.parse_args()
    try:
        asyncio.run(main(a))
    except KeyboardInterrupt:
        pass
    sys.exit(0)
