"""What every part of a node is given: the time and randomness of the input
being handled, the memory account, counters and command statistics, what
the core knows of a client, and the log."""
