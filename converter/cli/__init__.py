"""The ``edgeconv`` command: a thin shell over the Python API.

Each command lives in ``converter/cli/commands/<name>.py`` and registers itself on the typer app.
Heavy libraries (onnx, torch, tensorflow, coremltools) are imported inside the commands, so
``edgeconv --help`` starts fast.  Every :class:`~converter.errors.EdgeconvError` becomes one line
on stderr and its exit code; anything else is an internal error (exit 70), with the traceback
only when ``EDGECONV_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

import typer

from .. import __version__
from .commands import COMMAND_MODULES
from .commands.coercion import install as plain_values_first
from ..errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED, EdgeconvError
from ..infra.fsutil import quiet_native_stderr

def _new_app() -> typer.Typer:
    new = typer.Typer(
        name="edgeconv",
        help="Take a trained model to an edge framework (TFLite, TNN, MACE, CoreML) that can run it.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    new.callback()(_main)
    return new


def _version(value: bool) -> None:
    if value:
        print(f"edgeconv {__version__}")
        raise typer.Exit()


def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Take a trained model to an edge framework (TFLite, TNN, MACE, CoreML) that can run it."""


def _app_with(modules) -> typer.Typer:
    """The app with the commands of ``modules`` (converter/cli/commands/<module>.py, each registering
    the command of its name)."""
    new = _new_app()
    for module in modules:
        importlib.import_module(f"converter.cli.commands.{module}").register(new)
    return new


def __getattr__(name: str):
    # ``app``, every command registered, is built on first use: ``main`` runs a command from an
    # app holding only that command (typer builds each command's parser from its signature, and
    # importing and building all ten is ~0.007 s of a 0.25 s port).
    if name == "app":
        globals()["app"] = built = _app_with(COMMAND_MODULES)
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _app_for(argv: list[str] | None) -> typer.Typer:
    """The app that runs ``argv``: the one command it names alone, else (no command, ``--help``,
    a mistyped name, or ``app`` already built and perhaps extended) every command."""
    args = sys.argv[1:] if argv is None else list(argv)
    if "app" not in globals() and args and args[0] in COMMAND_MODULES:
        return _app_with((args[0],))
    return __getattr__("app") if "app" not in globals() else globals()["app"]


def _fail(message: str, code: int) -> int:
    print(f"edgeconv: error: {one_line(message)}", file=sys.stderr)
    return code


def one_line(message: str, limit: int = 600) -> str:
    """The promise is one line: libraries' multi-line messages are joined, runaway ones cut."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# TensorFlow (a loader for Keras/SavedModel/.tflite inputs) writes start-up lines from C++
# straight to fd 2; TF_CPP_MIN_LOG_LEVEL alone no longer stops the oneDNN notice in TF 2.21.
# oneDNN's fused kernels only matter when TF computes, and edgeconv only traces graphs with it.
_QUIET_NATIVE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}


class _Signals:
    """SIGINT/SIGTERM raise KeyboardInterrupt (so atomic outputs clean up) and are remembered.

    typer turns a KeyboardInterrupt into a silent exit status 130; remembering the signal lets
    ``main`` still print its one line.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _Signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread (main() called from a worker thread)
                pass
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame) -> None:
        self.received = signum
        raise KeyboardInterrupt

    def exit(self) -> int:
        if self.received == signal.SIGTERM:
            return _fail("terminated; unfinished outputs were removed",
                         EXIT_TERMINATED)
        return _fail("interrupted; unfinished outputs were removed",
                     EXIT_INTERRUPTED)


def main(argv: list[str] | None = None) -> int:
    for name, value in _QUIET_NATIVE_ENV.items():
        os.environ.setdefault(name, value)
    plain_values_first()
    command = typer.main.get_command(_app_for(argv))
    with _Signals() as signals:
        try:
            result = command.main(args=argv, prog_name="edgeconv", standalone_mode=False)
        except EdgeconvError as err:
            return _fail(str(err), err.exit_code)
        except KeyboardInterrupt:
            return signals.exit()
        except OSError as err:  # an output or input path the library did not check itself
            where = f"{err.filename}: " if err.filename else ""
            return _fail(f"{where}{err.strerror or err}", EXIT_BAD_INPUT)
        except Exception as err:  # noqa: BLE001 - the promise is: never a traceback
            return _click_error(err)
    if signals.received is not None and result == EXIT_INTERRUPTED:
        return signals.exit()  # typer swallowed the KeyboardInterrupt into status 130
    return result if isinstance(result, int) else 0


def _click_error(err: Exception) -> int:
    # typer vendors click: recognise its exceptions by shape, not by import path.
    if type(err).__name__ == "NoArgsIsHelpError":  # bare `edgeconv`: the help is the answer
        print(err.format_message())
        return 0
    if hasattr(err, "format_message") and hasattr(err, "exit_code"):  # bad flag/argument/value
        ctx = getattr(err, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        return _fail(err.format_message() + hint, EXIT_BAD_INPUT)
    if type(err).__name__ == "Abort":
        return _fail("aborted", EXIT_INTERRUPTED)
    if os.environ.get("EDGECONV_DEBUG"):
        raise err
    return _fail(f"internal error: {type(err).__name__}: {err} (set EDGECONV_DEBUG=1 for a traceback)", EXIT_INTERNAL)


def run() -> None:
    """The console script: C++ libraries' own stderr chatter (LiteRT, TensorFlow) is dropped so
    that an error is exactly one line; ``EDGECONV_DEBUG=1`` keeps it for diagnosis."""
    if os.environ.get("EDGECONV_DEBUG"):
        sys.exit(main())
    with quiet_native_stderr():
        code = main()
    _exit(code)


def _exit(code: int) -> None:
    """Exit now, without tearing the interpreter down: freeing every object of numpy, onnx,
    typer, ... module by module takes ~0.04 s, a tenth of a small ``port``.  What an exit must
    do is done first: the atexit handlers run and the output is flushed.  While another
    (non-daemon) thread still runs, the usual exit, which waits for it."""
    import threading

    main_thread = threading.main_thread()
    if threading.current_thread() is not main_thread or any(
            t.is_alive() and not t.daemon for t in threading.enumerate() if t is not main_thread):
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``| head``): what Python's own exit returns
            code = code or 120
    os._exit(code)


if __name__ == "__main__":
    run()
