"""Measuring tools (scripts/benchmark.py and the GPU reports run them): not part of the library a user imports, and
nothing in the library imports this package.
"""
