"""Harmony (Bao, Peng, Wu 2019): reward predictor and interference-aware placement DRL."""
