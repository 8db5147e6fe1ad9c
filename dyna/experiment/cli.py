"""CLI commands of the experiment layer (placeholder until the runner lands)."""


def register(sub):
    """Add the experiment sub-commands to ``sub``."""
    return None
