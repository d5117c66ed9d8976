"""Subcommands that live in their own modules, one per group; `sandbox._cli` lists them.

Each module has an ``add(subparsers, common)`` like ``sandbox._cli``'s ``_add_<name>``
functions; what they share with ``sandbox._cli`` (config flags, usage errors) is in
`sandbox.cli._common`, so no module here imports ``sandbox._cli``.
"""
