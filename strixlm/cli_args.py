"""argparse types shared by the CLIs (`strixlm serve`, `strixlm router serve`, the benchmarks);
no heavy imports, so the router's CLI stays free of torch."""

from __future__ import annotations

import argparse
import socket


def port_number(text: str) -> int:
    """argparse type of --port: a TCP port, so a typo fails before the model loads."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port must be an integer, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port must be in 1..65535, got {port}")
    return port


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's TCP socket, bound before the slow start-up (a model load, an encoder
    build), so a port in use fails at once and names the flag; uvicorn then serves on it.
    ValueError for an address that cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"--host {host!r}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ValueError(f"--port {port}: cannot listen on {host}: {e.strerror}") from None
    return sock
