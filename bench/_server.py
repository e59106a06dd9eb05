"""The bench server in its own process, so the client under test never shares a GIL with it.

Prints its base URL on the first line, then serves until standard input closes.
"""

from __future__ import annotations

import sys

from bench._fixtures import app
from tests.servers import Server


def main() -> None:
    server = Server(app)
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
