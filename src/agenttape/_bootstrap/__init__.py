"""The directory put on the PYTHONPATH of Python child processes; see sitecustomize."""
