"""Test harness: real Prometheus and VictoriaMetrics servers on 127.0.0.1 over simulated fleets."""
