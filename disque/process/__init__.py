"""The disque-server process around the node, besides its listeners: the
command line, INFO's process fields, garbage-collector tuning and the
operating system calls."""
