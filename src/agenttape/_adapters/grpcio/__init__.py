"""grpcio: calls on sync (``sync``) and ``grpc.aio`` (``aio``) channels recorded and
replayed as gRPC interactions (see ``agenttape._core.grpc_wire`` for their form)."""
