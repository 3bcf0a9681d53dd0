#!/usr/bin/env python3
"""A TCP server that misbehaves on purpose, for kcache's remote-deadline tests.

Usage: misbehaving_server.py MODE   (listens on 127.0.0.1, a free port; prints
the port on the first line of stdout, then serves until killed)

Modes (each connection is served on its own thread):
  silent         accept, never read, never answer
  redis-trickle  answer every command with a 32 KiB bulk string, 100 bytes
                 every 100 ms (1 KiB/s): "+OK" never comes sooner
  redis-huge     answer every command with "$1610612736\\r\\n" (1.5 GiB
                 declared) and then zeros as fast as the client takes them
  http-trickle   answer every request "200" with a 32 KiB Content-Length and
                 a body of 100 bytes every 100 ms (32 KiB)
  http-huge      answer "200" with Content-Length 1.5 GiB, then zeros
  http-chunked   answer "200" with a chunked body of zeros that never ends
"""
import socket
import sys
import threading
import time

HUGE = 1536 * 1024 * 1024
TRICKLE_TOTAL = 32 * 1024


def read_request(conn, http):
    """Reads until a whole command or request head may have arrived."""
    data = b""
    conn.settimeout(30)
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
        if http and b"\r\n\r\n" in data:
            return data
        if not http and data.endswith(b"\r\n"):
            return data


def trickle(conn, total):
    sent = 0
    while sent < total:
        conn.sendall(b"x" * 100)
        sent += 100
        time.sleep(0.1)


def flood(conn, total):
    zeros = b"\0" * 65536
    sent = 0
    while sent < total:
        n = min(len(zeros), total - sent)
        conn.sendall(zeros[:n])
        sent += n


def serve(conn, mode):
    try:
        if mode == "silent":
            time.sleep(3600)
            return
        http = mode.startswith("http")
        while True:
            if read_request(conn, http) is None:
                return
            if mode == "redis-trickle":
                conn.sendall(b"$%d\r\n" % TRICKLE_TOTAL)
                trickle(conn, TRICKLE_TOTAL)
                conn.sendall(b"\r\n")
            elif mode == "redis-huge":
                conn.sendall(b"$%d\r\n" % HUGE)
                flood(conn, HUGE)
                conn.sendall(b"\r\n")
            elif mode == "http-trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % TRICKLE_TOTAL)
                trickle(conn, TRICKLE_TOTAL)
            elif mode == "http-huge":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % HUGE)
                flood(conn, HUGE)
            elif mode == "http-chunked":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                chunk = b"10000\r\n" + b"\0" * 65536 + b"\r\n"
                while True:
                    conn.sendall(chunk)
    except OSError:
        pass
    finally:
        conn.close()


def main():
    mode = sys.argv[1]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, mode), daemon=True).start()


if __name__ == "__main__":
    main()
