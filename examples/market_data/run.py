"""The market-data tool, replayed offline from its cassette: curl_cffi (the client yfinance
is built on, whose sockets live in libcurl) answers from cassettes/quotes.msgpack, byte for
byte, with no server and no network.

python examples/market_data/run.py            # replay from cassettes/, offline
python examples/market_data/run.py --record   # record again from the local stand-in
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from market_standin import MarketAPI

import agenttape
from market_data import quotes

CASSETTE = Path(__file__).resolve().with_name("cassettes") / "quotes.msgpack"
PORT = 8767
SYMBOLS = ["ACME", "GLOBEX", "INITECH"]


def record(path: Path = CASSETTE, port: int = PORT) -> list[str]:
    """The tool against the stand-in, recorded."""
    with MarketAPI(port=port) as api, agenttape.use_cassette(path, mode="all"):
        return quotes.answer(api.url, SYMBOLS)


def replay(path: Path = CASSETTE, port: int = PORT) -> list[str]:
    """The same calls, offline: mode none, so anything not in the cassette fails."""
    with agenttape.use_cassette(path, mode="none") as tape:
        lines = quotes.answer(f"http://127.0.0.1:{port}", SYMBOLS)
        print(f"Replayed {tape.play_count} of {len(tape.interactions)} recorded interactions")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record again from the stand-in")
    lines = record() if parser.parse_args().record else replay()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
