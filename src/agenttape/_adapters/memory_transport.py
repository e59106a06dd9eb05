"""An asyncio transport with nothing behind it but memory: the base of the transports that
replay a recorded answer to a library built on asyncio protocols (aiohttp's responses, the
WebSocket sessions of aiohttp and websockets). Writes go nowhere (what the client sends was
matched before); reading pauses and resumes as the protocol asks; a subclass delivers."""

from __future__ import annotations

import asyncio
from typing import Any


class MemoryTransport(asyncio.Transport):
    """``_deliver_again()`` is called when the protocol resumes reading; ``peer`` answers
    ``get_extra_info("peername")``."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, peer: tuple[str, int] | None = None
    ) -> None:
        super().__init__()
        self._loop = loop
        self._peer = peer
        self._paused = False
        self._closing = False

    def _deliver_again(self) -> None:
        """Delivery stopped while reading was paused: carry on."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._deliver_again()

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def is_closing(self) -> bool:
        return self._closing

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer if name == "peername" and self._peer is not None else default
