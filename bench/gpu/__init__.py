"""The GPU benchmark's modules (``python bench/gpu/run.py``); they import the product, never the tests."""
