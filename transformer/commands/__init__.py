"""The command-line tools (transformer-prepare, -train, -translate, -evaluate, -score, -average, -export, and
`python -m transformer COMMAND`): entry points in cli.py, the flags they share in flags.py, each command's work in a
module of its own.

The top of the import order: may import everything in the library; nothing in the library imports it.
"""
