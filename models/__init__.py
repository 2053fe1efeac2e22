"""Schedulers: heuristics and learned policies, their networks and training algorithms."""
