"""The scenario scripts; each runs as ``__main__`` under torchrun, one process per rank."""
