"""The ``edgeconv`` command: a thin shell over the Python API.

Each command lives in ``converter/commands/<name>.py`` and registers itself on the typer app.
Heavy libraries (onnx, torch, tensorflow, coremltools) are imported inside the commands, so
``edgeconv --help`` starts fast.  Every :class:`~converter.errors.EdgeconvError` becomes one line
on stderr and its exit code; anything else is an internal error (exit 70), with the traceback
only when ``EDGECONV_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from . import __version__
from .commands import COMMAND_MODULES
from .errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EdgeconvError

app = typer.Typer(
    name="edgeconv",
    help="Take a trained model to an edge framework (TFLite, TNN, MACE, CoreML) that can run it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"edgeconv {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Take a trained model to an edge framework (TFLite, TNN, MACE, CoreML) that can run it."""


for _module in COMMAND_MODULES:
    importlib.import_module(f"converter.commands.{_module}").register(app)


def _fail(message: str, code: int) -> int:
    print(f"edgeconv: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="edgeconv", standalone_mode=False)
    except EdgeconvError as err:
        return _fail(str(err), err.exit_code)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as err:  # noqa: BLE001 - the promise is: never a traceback
        # typer vendors click: recognise its exceptions by shape, not by import path.
        if hasattr(err, "format_message") and hasattr(err, "exit_code"):  # bad flag/argument/value
            return _fail(err.format_message().splitlines()[0], EXIT_BAD_INPUT)
        if type(err).__name__ == "Abort":
            return _fail("aborted", 130)
        if os.environ.get("EDGECONV_DEBUG"):
            raise
        return _fail(f"internal error: {type(err).__name__}: {err} (set EDGECONV_DEBUG=1 for a traceback)", EXIT_INTERNAL)
    return result if isinstance(result, int) else 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
