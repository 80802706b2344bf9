"""Warning filters for every Python process of a pinned environment's run (scripts/torch2-env.sh):
pytest's workers, cerarrun's ranks and the examples (scripts/envs/pinned-env.sh's strict_warnings
puts this folder on PYTHONPATH for that run only). Each line of CERAR_WARNING_FILTERS is
"action:message:category:module" with message and module as regular expressions, as in pytest's
filterwarnings, which the script passes to pytest itself; later lines win.
Python's own -W and PYTHONWARNINGS take literal text only, which cannot say "any UserWarning
that mentions deprecation".

This shadows Debian's sitecustomize, which only installs apport's hook where apport exists.
"""
import builtins
import os
import warnings


def _install(spec):
    action, message, category, module = (spec.split(":") + [""] * 4)[:4]
    warnings.filterwarnings(action.strip(), message.strip(),
                            getattr(builtins, category.strip() or "Warning"), module.strip())


for _line in os.environ.get("CERAR_WARNING_FILTERS", "").splitlines():
    if _line.strip():
        _install(_line)
