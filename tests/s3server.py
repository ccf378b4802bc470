"""moto's S3 server on 127.0.0.1, started by a test or a bench script in its own process.

A real S3 protocol endpoint (HTTP, listings, ETags, multipart) for s3fs, as s3fs's own
tests use it: ``moto.server.ThreadedMotoServer``. The buckets live in moto's process-wide
backend, so a server stopped and started again on the same port finds them as they were:
that is an endpoint gone for a while. Every request it answers is recorded, for tests that
count what a reader fetched.

    from s3server import S3Server          # tests/ is on the path (bench: sys.path.insert)
    with S3Server() as s3:
        s3.make_bucket("pool")
        os.environ.update(s3.env())        # s3fs and subprocesses then reach it
        ...
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

# s3fs (botocore) needs credentials and a region; moto accepts any.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class Request:
    """One request the server answered: method, bucket/key path (unquoted), query string."""

    method: str
    path: str
    query: str

    @property
    def is_listing(self) -> bool:
        return self.method == "GET" and "list-type=" in self.query

    @property
    def is_object_read(self) -> bool:
        """A GET of one object's bytes (not a listing, not a bucket query)."""
        return self.method == "GET" and not self.query and self.path.count("/") >= 2


class S3Server:
    """moto's S3 server on ``127.0.0.1``; ``port=0`` picks a free port on the first start."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.requests: list[Request] = []
        self._server: Any = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def env(self) -> dict[str, str]:
        """Environment variables pointing s3fs (botocore) at this server."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def storage_options(self) -> dict[str, Any]:
        """fsspec options for ``s3://`` URLs reaching this server, without the environment."""
        return {
            "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }

    def start(self) -> S3Server:
        """Serve on ``self.port`` (a free one the first time when it is 0)."""
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        self.port = server.get_host_and_port()[1]
        wsgi = server._server  # werkzeug's server: count requests, track connections
        wsgi.app = self._recording(wsgi.app)
        wsgi.RequestHandlerClass = self._tracking(wsgi.RequestHandlerClass)
        self._server = server
        return self

    def stop(self) -> None:
        """Go away as a crashed endpoint does: the port refuses, open connections are cut."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stop()
        server._server.server_close()  # ThreadedMotoServer.stop leaves the socket listening
        with self._lock:
            for conn in list(self._open):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (through the server, as any client would); its URL."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)
        return f"s3://{name}"

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _recording(self, app):
        def recorded(environ, start_response):
            request = Request(
                environ.get("REQUEST_METHOD", ""),
                unquote(environ.get("PATH_INFO", "")),
                environ.get("QUERY_STRING", ""),
            )
            with self._lock:
                self.requests.append(request)
            return app(environ, start_response)

        return recorded

    def _tracking(self, handler: type) -> type:
        owner = self

        class Tracked(handler):
            def setup(self) -> None:
                super().setup()
                with owner._lock:
                    owner._open.add(self.connection)

            def finish(self) -> None:
                with owner._lock:
                    owner._open.discard(self.connection)
                super().finish()

            def log_request(self, *args: object) -> None:  # recorded above, not printed
                pass

        return Tracked
