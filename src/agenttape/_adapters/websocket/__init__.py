"""WebSocket sessions: the replay peer and transports and the frame taps every WebSocket
client adapter shares, and one adapter per client library (websockets, aiohttp's
``ws_connect``, httpx-ws, websocket-client)."""
