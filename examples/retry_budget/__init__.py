"""A retry bug only a long retry-after shows, found with one injected fault."""
