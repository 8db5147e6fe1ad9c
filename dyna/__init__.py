"""dyna: a Dyna-style research toolkit for agents that learn from their own runs.

See DESIGN.md in the repository for the architecture. Sutton & Barto (2018), *Reinforcement
Learning: An Introduction*, 2nd ed., chapter 8 is the reference for the planning methods.
"""

__version__ = "0.1.0"

from dyna.errors import ConfigError, DynaError, MissingFileError, UnknownEnvError

__all__ = ["ConfigError", "DynaError", "MissingFileError", "UnknownEnvError", "__version__"]
