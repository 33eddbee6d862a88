"""A node's state: its parts wired together (what command handlers see),
what it asks of the process around it, memory eviction, and putting back the
jobs of an AOF."""
