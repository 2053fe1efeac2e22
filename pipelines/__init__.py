"""Prefect flows, their stage functions and the `schedlab` command line."""
