"""An intruder on another host of the cluster: against each HOST:PORT it
opens CONNECTIONS connections that claim a wrong token, one that sends an
endless line (8 MiB, no newline), and one that sends nothing. Prints one
JSON line per port: how many of the connections the server closed within
WAIT_S seconds, and whether it ever answered.

  python3 intruder.py HOST WAIT_S CONNECTIONS PORT...
"""
import json
import select
import socket
import sys
import threading
import time


def flood(host, port, connections, wait_s):
    opened = []
    for i in range(connections):
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(b"oobleck-store wrong-token\n" if i % 2 else
                  b'{"kind":"hello","role":"agent","node":"node0","token":"wrong-token"}\n')
        opened.append(s)
    endless = socket.create_connection((host, port), timeout=5)
    silent = socket.create_connection((host, port), timeout=5)

    def pour():
        chunk = b"x" * 65536
        try:
            for _ in range(128):
                endless.sendall(chunk)
        except OSError:
            pass
    pourer = threading.Thread(target=pour, daemon=True)
    pourer.start()
    closed, answered = set(), False
    everyone = opened + [endless]
    deadline = time.monotonic() + wait_s
    while len(closed) < len(everyone) and time.monotonic() < deadline:
        readable, _, _ = select.select([s for s in everyone if s not in closed], [], [], 0.2)
        for s in readable:
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                answered = True
            else:
                closed.add(s)
    for s in everyone + [silent]:
        s.close()
    return {"port": port, "connections": len(everyone), "closed": len(closed), "answered": answered}


if __name__ == "__main__":
    host, wait_s, connections = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    for port in map(int, sys.argv[4:]):
        print(json.dumps(flood(host, port, connections, wait_s)), flush=True)
