"""Command-line tools that run beside nodes."""
