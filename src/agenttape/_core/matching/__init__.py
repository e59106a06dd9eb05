"""Which recorded interaction serves a request: the matcher's keys and the queue a replay
takes interactions from."""
