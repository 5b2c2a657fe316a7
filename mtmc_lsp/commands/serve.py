"""``mtmc serve``: run the language server over stdio (default) or a TCP socket."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead, e.g. 127.0.0.1:2087")
    parser.add_argument("--log-file", metavar="PATH", help="write the server's own log here (default: stderr)")
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="level of the server's own log (editor messages go through window/logMessage)",
    )


def parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--tcp wants HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def _use_the_system_allocator() -> None:
    """Restart this process once under ``PYTHONMALLOC=malloc`` (POSIX), unless the user chose an allocator.

    pymalloc keeps arenas pinned by a few surviving objects, so after a large file is closed the
    server stayed at 2-3x its idle RSS; with the C allocator it returns near idle
    (benchmarks/results/reliability/close.md) for a few percent more CPU per analysis. ``exec``
    keeps the process id and the stdio pipes, so the client sees nothing. The new process starts
    with a safe path (``safe_exec``): the working directory is the workspace, whose files must not
    shadow our package or its dependencies.
    """
    if os.name != "posix" or "PYTHONMALLOC" in os.environ or getattr(sys, "frozen", False):
        return
    from mtmc_lsp.optimizer.safe_exec import safe_module_argv

    env = {**os.environ, "PYTHONMALLOC": "malloc"}
    try:
        os.execve(sys.executable, safe_module_argv("mtmc_lsp", "serve", *sys.argv[2:]), env)
    except OSError:  # no exec here: keep going with the allocator we have
        return


def run(args: argparse.Namespace) -> int:
    if sys.argv[1:2] == ["serve"]:
        _use_the_system_allocator()
    # stdout carries the protocol: the log goes to stderr or a file, never to stdout.
    handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, args.log_level), handlers=[handler], force=True)

    from mtmc_lsp.server.app import create_server

    server = create_server()
    # Everything imported so far lives as long as the process: keep it out of the cyclic collector's
    # generations so collections during editing stay short.
    gc.collect()
    gc.freeze()
    if args.tcp:
        try:
            host, port = parse_host_port(args.tcp)
        except ValueError as exc:
            print(f"mtmc serve: {exc}", file=sys.stderr)
            return 2
        server.start_tcp(host, port)
    else:
        server.start_io()
    # The client has gone (exit, or closed pipes). A compile or verification thread may still be
    # waiting on its subprocess; the editor must not wait for it, so leave without joining threads.
    code = 0 if getattr(server.protocol, "_shutdown", False) else 1
    logging.getLogger(__name__).info("connection closed; exiting with %d", code)
    logging.shutdown()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # pygls already closed it
        pass
    os._exit(code)
