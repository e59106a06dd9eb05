"""grpcio: calls on sync (``sync``) and ``grpc.aio`` (``aio``) channels recorded and
replayed as gRPC interactions (see ``agenttape._core.wire.grpc`` for their form)."""
