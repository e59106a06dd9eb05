"""The recording proxy: programs agenttape cannot patch (Node, Go, curl, a JVM) send their HTTP
through it. ``adapter`` is the one adapter (a request in, the shared exchange, the answer out);
``listener`` accepts connections and speaks ``http1`` or ``http2`` to the client; ``upstream``
reaches the server; ``ca`` mints certificates; ``websocket`` relays and replays sessions."""
