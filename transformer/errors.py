"""The exception types that reach the user as a single line and exit code 2: `UserError` and its `ConfigError`.

Library code raises `UserError` for anything the user can fix (a bad config key, a missing file, mismatched
parallel files, a checkpoint from another vocabulary). The command-line entry points catch it, print
`error: <message>` on stderr and exit with status 2, without a traceback. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input; the message names the problem and, where possible, the fix."""


class ConfigError(UserError):
    """An unknown config key, a value of the wrong type, or a value out of range (`config`, `typecheck`)."""
