"""Running the API: the host check and uvicorn (one process, or ``workers`` processes sharing the socket)."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol

from quarry.api.app import CONFIG_ENV, ApiConfig
from quarry.core.errors import UsageError

log = logging.getLogger("quarry.api")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def check_host(host: str, keys_required: bool, insecure_no_auth: bool) -> str | None:
    """Refuse a host others can reach when the store has no keys, unless told ``insecure_no_auth``;
    returns a warning to print, or None."""
    if is_loopback(host):
        return (
            None
            if keys_required
            else (
                "the store has no API keys: every caller is anonymous and reads public "
                "documents only (`quarry keys create` makes a key)"
            )
        )
    if keys_required:
        return None
    if not insecure_no_auth:
        raise UsageError(
            f"refusing to serve {host} without API keys: anyone who reaches it could search the index. "
            "Create one with `quarry keys create NAME`, bind 127.0.0.1, or pass --insecure-no-auth"
        )
    return (
        f"serving {host} WITHOUT authentication (--insecure-no-auth): anyone who reaches it reads the public documents"
    )


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, setting TCP_NODELAY on every connection.

    With ``--workers N`` uvicorn hands its workers the listening socket through multiprocessing,
    which rebuilds it with ``proto`` 0; asyncio then skips TCP_NODELAY on the connections it accepts
    (it checks ``proto == IPPROTO_TCP``), and Nagle's algorithm meeting the client's delayed ACK
    added ~40 ms to every answer (measured: 44 ms against 0.3 ms per request on an empty endpoint).
    """

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        super().connection_made(transport)


def serve(
    config: ApiConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    metrics_port: int | None = None,
) -> None:
    """Run the API until SIGTERM or Ctrl-C; ``metrics_port``: also serve ``/metrics`` on that loopback port."""
    import shutil
    import tempfile

    import uvicorn

    config.host = host
    os.environ[CONFIG_ENV] = config.to_env()  # each worker process builds its app from it
    folder = None
    if config.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        folder = tempfile.mkdtemp(prefix="quarry-metrics-")  # the workers' counters, summed at a scrape
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    metrics_server = None
    if metrics_port is not None:
        from quarry.api.deps import State
        from quarry.api.observe import serve_metrics

        metrics_server = serve_metrics(metrics_port, lambda: State(config))
    try:
        _run(uvicorn, config, host, port, log_level)
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _run(uvicorn, config: ApiConfig, host: str, port: int, log_level: str) -> None:
    uvicorn.run(
        "quarry.api.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=config.workers,
        http="quarry.api.server:NoDelayH11Protocol",
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=10,
        log_config=_log_config(log_level),
        # a worker answers uvicorn's health check only once it has imported the app: on a busy
        # machine that took more than the default 5 s, and uvicorn killed and respawned workers in a loop
        timeout_worker_healthcheck=60,
    )


def _log_config(log_level: str) -> dict:
    """uvicorn's logging: its own text lines, or JSON ones (``--log-format json``), with quarry's
    loggers (the answer lines among them) on its handler at ``log_level``, in every worker process."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    from quarry.core.environment import environment
    from quarry.core.logs import uvicorn_config

    config = uvicorn_config(environment().log_format) or copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["quarry"] = {"handlers": ["default"], "level": log_level.upper(), "propagate": False}
    return config
