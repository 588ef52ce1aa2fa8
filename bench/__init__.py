"""Benchmarks that measure the service beside baselines taken in the same run."""
