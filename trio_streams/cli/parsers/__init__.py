"""The parsers of the ``trio-streams`` commands, one module each.

A module's ``register(parser)`` gives its command's parser a description, arguments and a
handler. It imports only argument types (:mod:`..args`) and the few constants its help names;
the handler is named, not imported (:func:`..args.deferred`), so building a parser, or printing
``--help``, imports nothing of the transports and the command imports what it uses when it runs.
"""
