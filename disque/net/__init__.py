"""The network adapters: client connections, the cluster bus over TCP and its
authentication, and TLS for both."""
