"""The core: the library-neutral model, cassettes and their files, matching, redaction, and the
one exchange seam adapters call. Names no HTTP library."""
