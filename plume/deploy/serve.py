"""``plume-serve``: a Plume export behind the protocol of a real player or sender.

::

    plume-serve pensieve EXPORT [--host 127.0.0.1] [--port 8333] [--decision-timeout 1]
    plume-serve puffer EXPORT IPC_PATH
    plume-serve puffer ABR_NAME EXPORT IPC_PATH
    plume-serve pcc EXPORT --write-module DIR [--name plume_aurora] [--profile contract|pcc]
                    [--initial-rate-mbps 6]

``pensieve`` serves Pensieve's dash.js player (HTTP POST per chunk, answer the next level or
``REFRESH``) until SIGINT / SIGTERM; one log line per video session
(:mod:`plume.deploy.adapters.pensieve`). It listens with a backlog of 1,024 connections
(clamped by the kernel's ``net.core.somaxconn``), serves each connection in its own thread
and answers ``503`` to a POST not decided within ``--decision-timeout`` seconds (default 1).

``puffer`` is the controller process of Puffer's ``python_ipc``: it connects to the Unix
socket Puffer listens on and answers until Puffer closes it (one process per video session,
as Puffer runs it). Puffer starts ``<test_path> <abr_name> <model_path> <ipc_path>``; the
three-argument form takes exactly that layout, so a two-line ``test_path`` script runs it::

    #!/bin/sh
    exec /path/to/venv/bin/plume-serve puffer "$@"

with ``model_path`` set to the export directory in Puffer's ``abr_config``
(:mod:`plume.deploy.adapters.puffer`).

``pcc`` writes ``DIR/<name>.py``, a rate-control helper PCC-Uspace loads with
``-pyhelper=<name> -pypath=DIR`` (:mod:`plume.deploy.adapters.pcc`); PCC-Uspace must embed
the Python version of this environment. A start rate that is not a finite number > 0 is
refused before anything is written.

Exit status: 0 after a clean stop, 1 when the peer cannot be reached (or, with one line, an
unexpected failure), 2 for a bad argument or export; errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import threading
from collections.abc import Callable

from plume.deploy.adapters.pensieve import DECISION_DEADLINE_S

__all__ = ["main"]

log = logging.getLogger("plume.deploy.serve")


class _Stop(Exception):
    """Raised by the signal handler to leave a blocking loop."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plume-serve", description="Serve a Plume export over a real controller protocol.")
    sub = parser.add_subparsers(dest="protocol", required=True, metavar="PROTOCOL")
    p = sub.add_parser("pensieve", help="Pensieve's dash.js decision server (HTTP)")
    p.add_argument("export", metavar="EXPORT", help="export directory (abr, pensieve variant)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8333, help="port (default 8333; 0: any free)")
    p.add_argument("--decision-timeout", type=float, default=DECISION_DEADLINE_S, metavar="S",
                   help="seconds a POST may wait for its decision before it is answered 503 "
                        f"(default {DECISION_DEADLINE_S:g})")
    p = sub.add_parser(
        "puffer", help="controller for Puffer's python_ipc (connects to Puffer's socket)",
        description="Arguments: EXPORT IPC_PATH, or Puffer's own layout ABR_NAME EXPORT "
                    "IPC_PATH (ABR_NAME is only logged).")
    p.add_argument("args", nargs="+", metavar="ARG", help="[ABR_NAME] EXPORT IPC_PATH")
    p.add_argument("--frame-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for the rest of a frame once its length arrived (default 10)")
    p.add_argument("--connect-timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for Puffer's socket (default 5)")
    p = sub.add_parser("pcc", help="write a PCC-Uspace Python rate-control helper module")
    p.add_argument("export", metavar="EXPORT", help="export directory (cc)")
    p.add_argument("--write-module", required=True, metavar="DIR", help="directory to write to")
    p.add_argument("--name", default="plume_aurora", help="module name (-pyhelper=NAME)")
    p.add_argument("--profile", choices=("contract", "pcc"), default="contract",
                   help="rate start and clip: the export's training clip (default) or "
                        "PCC-RL's deployment clip, [0.5, 300] Mbit/s")
    p.add_argument("--initial-rate-mbps", type=float, default=6.0, metavar="R",
                   help="a flow's starting rate, Mbit/s (default 6, PCC-RL's)")
    return parser


def _on_signals(handler: Callable) -> None:
    """SIGINT and SIGTERM both stop the server cleanly."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def _serve_pensieve(args: argparse.Namespace) -> int:
    """Serve until a signal; the HTTP server runs in a thread so the main one can stop it."""
    from plume.deploy.adapters.pensieve import make_server

    if not (math.isfinite(args.decision_timeout) and args.decision_timeout > 0):
        raise ValueError(f"--decision-timeout must be a finite number of seconds > 0, got "
                         f"{args.decision_timeout:g}")
    server = make_server(args.export, args.host, args.port, args.decision_timeout)
    host, port = server.server_address[:2]
    print(f"plume-serve pensieve: listening on http://{host}:{port} (export {args.export})",
          flush=True)
    stop = threading.Event()
    _on_signals(lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="pensieve-http", daemon=True)
    thread.start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        server.decisions.close()
    log.info("plume-serve pensieve: stopped")
    return 0


def _serve_puffer(args: argparse.Namespace) -> int:
    """One Puffer video session: connect, answer until the stream ends or a signal."""
    from plume.deploy.adapters.puffer import PufferIpcClient
    from plume.deploy.runtime import load_controller

    if len(args.args) not in (2, 3):
        raise ValueError("puffer takes EXPORT IPC_PATH or ABR_NAME EXPORT IPC_PATH, got "
                         f"{len(args.args)} arguments")
    abr_name = args.args[0] if len(args.args) == 3 else "-"
    export, ipc_path = args.args[-2:]
    client = PufferIpcClient(load_controller(export), ipc_path, args.frame_timeout,
                             args.connect_timeout)

    def stop(*_: object) -> None:
        raise _Stop()

    _on_signals(stop)
    try:
        client.connect()
        print(f"plume-serve puffer: connected to {ipc_path} (abr {abr_name}, export {export})",
              flush=True)
        summary = client.serve()
        log.info("plume-serve puffer: %s", summary)
    except _Stop:
        log.info("plume-serve puffer: stopped by signal (%s)", client.totals)
    except ConnectionError as e:
        print(f"plume-serve puffer: {e}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


def _write_pcc(args: argparse.Namespace) -> int:
    """Check the start rate (before the export is even read), then write the module."""
    rate = args.initial_rate_mbps
    if not (math.isfinite(rate) and rate > 0 and math.isfinite(rate * 1e6)):
        raise ValueError(f"--initial-rate-mbps must be a finite number > 0, got {rate:g}")
    from plume.deploy.adapters.pcc import write_module

    path = write_module(args.export, args.write_module, args.name, args.profile, rate * 1e6)
    print(f"plume-serve pcc: wrote {path}")
    print(f"PCC-Uspace flags: -pyhelper={args.name} -pypath={path.parent}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The ``plume-serve`` command."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    run = {"pensieve": _serve_pensieve, "puffer": _serve_puffer, "pcc": _write_pcc}
    try:
        return run[args.protocol](args)
    except (OSError, ValueError, KeyError) as e:  # a bad export, a busy port: one line
        print(f"plume-serve {args.protocol}: error: {_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # never a traceback: one line (the traceback at debug level)
        log.debug("plume-serve %s: traceback", args.protocol, exc_info=True)
        print(f"plume-serve {args.protocol}: internal error: {type(e).__name__}: {_line(e)}",
              file=sys.stderr)
        return 1


def _line(err: BaseException) -> str:
    """An exception's message on one line."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
