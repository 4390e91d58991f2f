"""The parent's work while a child loads a torch model (isolate.run_models(meanwhile=...)).

The steps overlap the child (the later stages' imports); they must never outlive it, must not poll a
reaped child again, and a failing step must not fail the load."""

import json

import pytest

from converter.frontend import isolate
from converter.errors import TimedOut
from converter.port.loading import preload_steps


class FakeChild:
    """poll() says "running" ``runs`` times, then exit status 0 once; polling again is an error,
    as ``os.waitpid`` on a reaped child is."""

    def __init__(self, runs: int, tmp):
        self.runs, self.tmp, self.reaped, self.killed = runs, tmp, False, False

    def poll(self):
        assert not self.reaped, "polled a child that was already reaped"
        if self.runs > 0:
            self.runs -= 1
            return None
        (self.tmp / "status.json").write_text(json.dumps({"files": []}))
        self.reaped = True
        return 0

    def kill(self):
        self.killed = True


def test_steps_run_while_the_child_works_and_failures_are_ignored(tmp_path):
    child, ran = FakeChild(runs=10, tmp=tmp_path), []

    def fails():
        ran.append("fails")
        raise ImportError("no such module")

    isolate._wait(child.poll, child.kill, tmp_path, 30, "test", [lambda: ran.append(1), fails, lambda: ran.append(3)])
    assert ran == [1, "fails", 3]
    assert child.reaped and not child.killed


def test_steps_stop_when_the_child_is_done(tmp_path):
    child, ran = FakeChild(runs=1, tmp=tmp_path), []
    isolate._wait(child.poll, child.kill, tmp_path, 30, "test", [lambda n=n: ran.append(n) for n in range(5)])
    assert ran == [0]  # polled once more before the second step: the child had finished
    assert child.reaped and not child.killed


def test_an_interrupted_step_still_stops_the_child(tmp_path):
    child = FakeChild(runs=100, tmp=tmp_path)

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        isolate._wait(child.poll, child.kill, tmp_path, 30, "test", [interrupted])
    assert child.killed


def test_the_time_limit_counts_the_steps(tmp_path):
    child = FakeChild(runs=10**6, tmp=tmp_path)
    with pytest.raises(TimedOut):
        isolate._wait(child.poll, child.kill, tmp_path, 0.0, "test", [lambda: None])
    assert child.killed


def test_preload_steps_cover_each_framework_once():
    steps = preload_steps(["tflite", "coreml", "tflite"], verify=True)
    targets = [s.__self__.name for s in steps if hasattr(s, "__self__")]
    modules = [s.args[0] for s in steps if hasattr(s, "args")]
    assert targets == ["tflite", "coreml"]
    assert "onnxruntime" in modules
    assert "onnxruntime" not in [s.args[0] for s in preload_steps(["tnn"], verify=False) if hasattr(s, "args")]
