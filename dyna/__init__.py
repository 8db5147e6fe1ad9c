"""dyna: a Dyna-style research toolkit for agents that learn from their own runs.

docs/architecture.md in the repository gives the layers, the data flow, the names and a
glossary of the project's own words. Sutton & Barto (2018), *Reinforcement Learning: An
Introduction*, 2nd ed., chapter 8 is the reference for the planning methods.
"""

__version__ = "0.1.0"

import os as _os

from dyna import kernel_cache as _kernel_cache

# Before any dyna module imports numba: compiled kernels are cached per version of their
# sources (see dyna.kernel_cache), unless NUMBA_CACHE_DIR is set by the user.
_here = _os.path.dirname(_os.path.abspath(__file__))
_kernel_cache.configure([_here] + [p for p in [_os.path.join(_os.path.dirname(_here), "envs")]
                                   if _os.path.isdir(p)])
del _here

from dyna.errors import ConfigError, DynaError, MissingFileError, UnknownEnvError

__all__ = ["ConfigError", "DynaError", "MissingFileError", "UnknownEnvError", "__version__"]
