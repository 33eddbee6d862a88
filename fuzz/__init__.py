"""Fuzz targets and their engines (docs/security.md, "Fuzzing")."""
