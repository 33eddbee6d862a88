"""The commands (spec: commands.md): ``command`` (a table entry), ``access``
(the access check and redaction), ``args`` (option parsing), one module per
family of commands, and ``table`` (name → handler, arity, flags), which
``disque.node`` dispatches through. Handlers are given the node's
``NodeState`` (``disque.state.nodestate``)."""
