"""The ``coffer`` command: argv -> settings -> one call on the core -> text or ``--json``.

This is the only package that reads ``sys.argv`` and the process environment. Errors print one
line (with a hint, in the command line's words) on stderr and exit 1; usage errors exit 2.
A reader that closes stdout early (``| head``) ends a command quietly, with status 141.

Only the commands that search or embed (``Command.embeds`` in the table) embed documents that
are due; when their embedder fails they say so once, in one line, after their output. Every
other command reads with ``embed_on_read_seconds`` 0: listing or describing never loads a model.

    _commands    the command table: words, help, arguments, handler of every command
    _parser      the argparse parser built from it
    _main        main(): settings, the handler, exit statuses
    _kb, _ingest, _retrieval, _portability, _maintenance, _auth, _embeddings, _serve
                 the commands, each with its arguments
    _service     the core opened for one command
    _output      --json or text, tables, errors and notes on stderr

Importing this package (and so parsing, ``--help`` and ``--version``) loads neither pydantic nor
the core: each handler imports what it needs when it runs (tests/test_architecture.py checks it).
Nor does it load the standard modules that cost milliseconds and only some commands use
(``logging``, ``json``, ``shlex``, ``dataclasses``): ``coffer --version`` costs little more than
the interpreter's own start (``bench/startup.py`` measures it; docs/benchmarks.md, "Start-up").
"""

from __future__ import annotations

from coffer_mcp.cli._commands import COMMANDS, Command
from coffer_mcp.cli._main import main, serve_main

__all__ = ["COMMANDS", "Command", "main", "serve_main"]

_KB_COMMANDS = [(c.words[1], c.help, c.arguments) for c in COMMANDS if c.words[0] == "kb"]
"""``(name, help, arguments)`` of each ``coffer kb`` command, as tests/test_docs.py reads them."""
