"""The wire formats: the cassette file's msgpack (read within bounded memory), gRPC calls and
WebSocket frames in the library-neutral model."""
