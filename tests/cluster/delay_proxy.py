"""A delaying proxy for one namespace host: every byte the host sends over
TCP to another host leaves DELAY_MS later, as `tc qdisc add dev eth0 root
netem delay DELAY_MS` would make it (this kernel has no netem).

  python3 delay_proxy.py DELAY_MS PORT     (run on the host, as root)

It installs nftables rules on the host (table `ip delay_proxy`) that
redirect every TCP connection the host makes to, or takes from, another
host (SSH excepted) to PORT, where it accepts the connection, finds the
original destination (SO_ORIGINAL_DST) and connects there itself with a
socket mark the rules let through. Bytes going out of the host wait
DELAY_MS in order; bytes coming in are passed on at once. Connections
already open when it starts are not delayed. It removes its rules when
it ends (SIGTERM, SIGINT); it prints "ready" once they are in place.
"""
import asyncio
import signal
import socket
import struct
import subprocess
import sys
import time

MARK = 0x2D
SO_ORIGINAL_DST = 80
CHUNK = 1 << 16


def rules(port):
    return (f"table ip delay_proxy {{\n"
            f"  chain out {{ type nat hook output priority -100; meta mark {MARK} return; "
            f"fib daddr type local return; tcp dport 22 return; ip protocol tcp redirect to :{port}; }}\n"
            f"  chain pre {{ type nat hook prerouting priority -100; tcp dport 22 return; "
            f"ip protocol tcp redirect to :{port}; }}\n"
            f"}}\n")


def original_destination(sock):
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


def is_local(address):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.bind((address, 0))
        return True
    except OSError:
        return False
    finally:
        probe.close()


async def pipe(reader, writer, delay_s):
    """Bytes from READER to WRITER, each chunk DELAY_S after it arrived."""
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    delivering = asyncio.create_task(deliver())
    try:
        while data := await reader.read(CHUNK):
            queue.put_nowait((time.monotonic() + delay_s, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0, None))
    try:
        await delivering
    except (ConnectionError, OSError):
        pass


async def serve(client_reader, client_writer, delay_s):
    sock = client_writer.get_extra_info("socket")
    try:
        host, port = original_destination(sock)
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.setblocking(False)
        await asyncio.get_running_loop().sock_connect(upstream, (host, port))
        up_reader, up_writer = await asyncio.open_connection(sock=upstream)
    except OSError:
        client_writer.close()
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Out of this host: a connection to a host elsewhere sends what the
    # client writes; one taken from elsewhere (to this host's own address)
    # sends what the local server writes.
    outgoing = not is_local(host)
    await asyncio.gather(pipe(client_reader, up_writer, delay_s if outgoing else 0),
                         pipe(up_reader, client_writer, 0 if outgoing else delay_s))
    for w in (client_writer, up_writer):
        w.close()


async def main(delay_ms, port):
    server = await asyncio.start_server(lambda r, w: serve(r, w, delay_ms / 1000), "0.0.0.0", port,
                                        reuse_address=True, backlog=1024)
    subprocess.run(["nft", "-f", "-"], input=rules(port), text=True, check=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    try:
        await stop.wait()
    finally:
        subprocess.run(["nft", "delete", "table", "ip", "delay_proxy"], capture_output=True)
        server.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]), int(sys.argv[2])))
