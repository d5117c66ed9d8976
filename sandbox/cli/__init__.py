"""Subcommands that live in their own modules, one per group; `sandbox._cli` lists them.

Each module has an ``add(subparsers, common)`` like ``sandbox._cli``'s ``_add_<name>``
functions, and imports the shared helpers of ``sandbox._cli`` (config flags, errors) lazily,
since ``sandbox._cli`` imports these modules.
"""
