"""The disque-server process around the node, besides its listeners: the
command line, INFO's process fields, garbage-collector tuning, the
operating system calls and the process title."""
