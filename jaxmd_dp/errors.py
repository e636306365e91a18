"""The one exception type for problems a user can fix (bad files, bad config keys)."""


class InputError(Exception):
    """A user-facing error: one line naming the file or config key and what is wrong.

    Command-line entry points print ``error: <message>`` and exit with status 1, without a traceback.
    Anything else that is raised is a bug and keeps its traceback.
    """
