"""Importing a user's own module (``env.package``, ``sampler.package``): a dotted module path
or a ``.py`` file. Such a module is code and runs with the user's rights; whatever it raises
while importing becomes one ImportError line naming its file and line, and a module that
failed is never kept (the next import tries again)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

__all__ = ["import_user_module"]


def import_user_module(package: str, key: str, prefix: str):
    """Import ``package`` for the config key ``key`` (e.g. ``env.package``); a ``.py`` file is
    loaded once, as ``<prefix>_<file stem>`` (dataclasses and pickle look modules up by
    name)."""
    path = Path(package).expanduser()
    if path.suffix == ".py" and not path.is_file():
        raise ImportError(f"{key}={package!r}: no such file")
    name = f"{prefix}_{path.stem}" if path.suffix == ".py" else package
    try:
        if path.suffix != ".py":
            return importlib.import_module(package)
        if name not in sys.modules:
            loader = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module
            loader.loader.exec_module(module)
        return sys.modules[name]
    except ModuleNotFoundError as err:
        sys.modules.pop(name, None)
        raise ImportError(f"{key}={package!r}: {err}") from None
    except Exception as err:  # noqa: BLE001 (the user's module: whatever it raised)
        sys.modules.pop(name, None)
        raise ImportError(f"{key}={package!r} failed to import: "
                          f"{_where_it_failed(err)}") from None


def _where_it_failed(err: Exception) -> str:
    """'SyntaxError: invalid syntax (env.py:12)': the error and the user's file and line."""
    if isinstance(err, SyntaxError):
        return f"{type(err).__name__}: {err.msg} ({err.filename}:{err.lineno})"
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith("<frozen")]
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"
