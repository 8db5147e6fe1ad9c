"""Another name of :mod:`dyna.fileio.unique_json`, for the modules that import it as
``dyna._json`` (:mod:`dyna.redact` sets its ``show_key`` through this name); new code
imports :mod:`dyna.fileio.unique_json`.

The name is bound to that module object itself (not to a copy of its names), so a value
set here, such as ``show_key``, is the value the module uses.
"""

import sys

from dyna.fileio import unique_json

sys.modules[__name__] = unique_json
