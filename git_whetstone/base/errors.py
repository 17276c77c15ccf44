"""The one error type the library raises for anything a user can act on (the doors print its one-line
message); anything else escaping the library is a bug.
"""
from __future__ import annotations

BAD_INPUT = 2
RUNTIME = 1


class WhetstoneError(Exception):
    """A one-line, user-facing failure. `exit_code` 2 means bad input, 1 a runtime failure."""

    def __init__(self, message: str, *, exit_code: int = BAD_INPUT) -> None:
        message = " ".join(str(message).split())  # always one line
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def shown(value: object, limit: int = 40) -> str:
    """repr() of a user-supplied value, cut so a 10 kB name cannot flood an error line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def unicode_text(text: str, what: str) -> str:
    """`text`, if it can be written as UTF-8. A lone surrogate (a JSON string can carry one) cannot,
    and is bad input rather than a crash half way through a write."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WhetstoneError(f"{what} is not valid Unicode text (a lone surrogate at character {exc.start + 1})") \
            from None
    return text
