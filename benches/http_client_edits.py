#!/usr/bin/env python3
"""Relabels as an ordinary client makes them: Python's http.client, one keep-alive
connection, PATCHes of random records in sealed blocks of a 10,000-record entry of 1 KiB
records, against the real binary. Beside it, in the same run and against the same server,
a raw-socket client that parses nothing (the bench's own client, `benches/metadata.rs`,
is of that kind) and the server's CPU per request from /proc, so the figures say where
the time goes: in the server, or in the client.

    cargo build --release && python3 benches/http_client_edits.py [BIN...]

With several binaries (an older build beside the current one), their rounds alternate
in one run, so a busy machine weighs on each alike; each line is the median of 5 rounds.
"""
import http.client
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROUNDS, PER_ROUND = 5, 1000


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, mode):
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory()
        env = dict(os.environ, RS_SYNC_MODE=mode, RS_LOG_LEVEL="WARN")
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-path", self.dir.name, "--port", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port)
                self.call("GET", "/api/v1/alive")
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit(f"{binary} did not start")
        self.call("POST", "/api/v1/b/m")
        for ts in range(1, 10_001):
            self.call("POST", f"/api/v1/b/m/r?ts={ts}", b"x" * 1024,
                      {"content-type": "application/octet-stream"})
        self.raw = socket.create_connection(("127.0.0.1", self.port))
        self.raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method, path, body=b"", headers=None):
        self.conn.request(method, path, body, headers or {})
        answer = self.conn.getresponse()
        answer.read()
        assert answer.status == 200, (method, path, answer.status)

    def raw_call(self, path, k):
        self.raw.sendall(f"PATCH {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n"
                         f"x-reduct-label-k: {k}\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            got += self.raw.recv(4096)
        assert got.startswith(b"HTTP/1.1 200"), got[:80]

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def round_of(server, client, picks):
    cpu0, client0, t0 = cpu_seconds(server.proc.pid), time.process_time(), time.perf_counter()
    for k, ts in enumerate(picks):
        path = f"/api/v1/b/m/r?ts={ts}"
        if client == "http.client":
            server.call("PATCH", path, b"", {"x-reduct-label-k": str(k)})
        else:
            server.raw_call(path, k)
    n = len(picks)
    wall = time.perf_counter() - t0
    return (n / wall, wall / n * 1e6, (cpu_seconds(server.proc.pid) - cpu0) / n * 1e6,
            (time.process_time() - client0) / n * 1e6)


def main():
    binaries = sys.argv[1:] or ["target/release/halflife"]
    rng = random.Random(7)
    for mode in ["never", "interval:10ms"]:
        servers = [Server(b, mode) for b in binaries]
        results = {(b, c): [] for b in binaries for c in ("http.client", "raw socket")}
        for _ in range(ROUNDS):
            picks = [rng.randint(1, 9000) for _ in range(PER_ROUND)]
            for binary, server in zip(binaries, servers):
                for client in ("http.client", "raw socket"):
                    results[(binary, client)].append(round_of(server, client, picks))
        for (binary, client), rows in results.items():
            rate, wall, server_cpu, client_cpu = (statistics.median(r[i] for r in rows) for i in range(4))
            print(f"{mode:>13} {client:<11} {binary}: {rate:7.0f} relabels/s, {wall:6.1f} us each "
                  f"(server CPU {server_cpu:5.1f} us, client CPU {client_cpu:5.1f} us)")
        for server in servers:
            server.stop()


if __name__ == "__main__":
    main()
