"""The one base class for errors a user can fix (a bad file, row, config value or endpoint). The entry point
prints such an error as one line and exits 2, without importing every stage to know its exception types."""


class UserError(Exception):
    """Something in the input or the settings is wrong; the message names where (file, line or row, key) and what."""
