"""kcache run's Python start-up module (docs/run.md, "Triton under kcache run").

``kcache run`` puts this file's directory first on PYTHONPATH, so that every
Python program of the run imports it at start-up (``site`` imports the first
``sitecustomize`` on sys.path). It does two things and never raises:

1. Turns on the kcache integrations that their variables ask for
   (``KCACHE_TRITON=1``, which ``kcache run`` sets unless the user set it;
   ``KCACHE_TORCH``, ``KCACHE_JAX``), as the ``kcache-autoload.pth`` file of an
   installed kcache does (``kcache._autoload``), wherever the ``kcache``
   package can be imported: from site-packages, and also from PYTHONPATH,
   where Python reads no .pth file. Where kcache cannot be imported it does
   nothing (one lookup on sys.path).
2. Runs the ``sitecustomize`` module this one hides (the distribution's or the
   virtual environment's), if there is one further along sys.path, as
   ``site`` would have: an error in it is printed as ``site`` prints one.
"""

import os
import sys


def _kcache_run_startup() -> None:
    on = [v for v in ("KCACHE_TRITON", "KCACHE_TORCH", "KCACHE_JAX")
          if os.environ.get(v, "").strip().lower() not in ("", "0", "false", "no", "off")]
    if on:
        try:
            import importlib.util

            if importlib.util.find_spec("kcache") is not None:
                import kcache._autoload

                kcache._autoload.activate()
        except Exception as exc:  # never break the program's start
            sys.stderr.write(f"kcache: warning: kcache run: {', '.join(on)} set, but kcache's integrations could not "
                             f"be turned on ({type(exc).__name__}: {exc}); the program runs without them\n")


def _run_hidden_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop("sitecustomize", None)
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")


_kcache_run_startup()
_run_hidden_sitecustomize()
