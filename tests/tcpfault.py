"""A TCP forwarder on 127.0.0.1 that can pass, refuse or hang: an endpoint's outages, for real.

    with TcpFault(target_port) as fault:   # clients connect to fault.port
        fault.refuse()   # the port refuses connections; open ones are reset
        fault.hang()     # connections are accepted and never answered; open ones go silent
        fault.passing()  # back to forwarding every byte both ways

Used by the tests in front of moto's S3 server (tests/s3server.py): the client under test
sees the same protocol, with outages a real endpoint has.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

PASS, REFUSE, HANG = "pass", "refuse", "hang"


class TcpFault:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.mode = PASS
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> TcpFault:
        self._listen()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._stop_listening()
        self._cut()

    def passing(self) -> None:
        self.mode = PASS
        if self._listener is None:
            self._listen()

    def refuse(self) -> None:
        self.mode = REFUSE
        self._stop_listening()
        self._cut()

    def hang(self) -> None:
        self.mode = HANG
        if self._listener is None:
            self._listen()
        self._cut(reset=False)

    def _listen(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        sock.listen(64)
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _stop_listening(self) -> None:
        sock, self._listener = self._listener, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _cut(self, reset: bool = True) -> None:
        """End the open connections: reset (refused), or hold them silent (hang)."""
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            if reset:
                with contextlib.suppress(OSError):
                    conn.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                with contextlib.suppress(OSError):
                    conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(client)
            if self.mode == HANG:
                continue  # held open, never answered
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._conns.add(upstream)
        pair = {client: upstream, upstream: client}
        try:
            while True:
                if self.mode == HANG:  # open connections go silent too
                    threading.Event().wait(0.05)
                    if self._closed:
                        return
                    continue
                ready, _, _ = select.select(list(pair), [], [], 0.05)
                for sock in ready:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    pair[sock].sendall(data)
        except OSError:
            return
        finally:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.close()
