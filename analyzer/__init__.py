"""Analyzer: reads DCGM series from Prometheus and turns them into findings about GPU waste."""
