"""The directory ``agenttape run`` puts on PYTHONPATH; see sitecustomize."""
