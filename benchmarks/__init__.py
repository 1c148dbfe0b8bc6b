"""Measured speed of vidtx: CPU benchmarks (`python -m benchmarks.run`, `make bench`) and one GPU script
(`python -m benchmarks.gpu`). Not part of the installed library; results go to `benchmarks/results/`."""
