"""Building the narrow attention kernel survives an interrupted build and a second checkout.

torch's extension loader marks a build with a ``lock`` file and waits forever for one it finds; a
build killed mid-compile left one and every later run hung (seen in a session: a table run waited
on it). ``build_lock`` is an OS lock that dies with its process, under which such a file is stale.
These tests compile nothing: the loader is replaced where a test reaches it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from specharness.model.accel import narrow_attention

pytestmark = pytest.mark.skipif(narrow_attention.fcntl is None, reason="POSIX file locks only")

HOLDER = """
import sys, time
from pathlib import Path
from specharness.model.accel.narrow_attention import build_lock
d = Path(sys.argv[1])
with build_lock(d):
    (d / "lock").touch()  # what torch's loader writes while it builds
    print("held", flush=True)
    time.sleep(600)
"""


def within(seconds: float, work) -> None:
    """Run ``work`` in a thread; fail (instead of hanging the suite) when it takes longer."""
    done = threading.Event()
    errors: list[BaseException] = []

    def run():
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(seconds), f"still waiting after {seconds} s"
    if errors:
        raise errors[0]


def test_a_build_killed_while_holding_the_lock_leaves_nothing_that_blocks_the_next(tmp_path, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert (tmp_path / "lock").exists()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
    seen = []

    def take():
        with narrow_attention.build_lock(tmp_path):
            seen.append((tmp_path / "lock").exists())

    within(30, take)
    assert seen == [False]
    assert "left by an interrupted build" in capsys.readouterr().err


def test_a_live_build_is_waited_for_and_its_lock_file_kept_until_it_ends(tmp_path, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        entered = threading.Event()

        def take():
            with narrow_attention.build_lock(tmp_path):
                entered.set()

        waiter = threading.Thread(target=take, daemon=True)
        waiter.start()
        assert not entered.wait(1.0), "took the lock while another process held it"
        assert (tmp_path / "lock").exists()
        holder.terminate()
        assert entered.wait(30)
    finally:
        holder.kill()
    assert "waiting for another process building" in capsys.readouterr().err


def test_the_loader_compiles_the_copy_in_the_build_directory_with_no_stale_lock(tmp_path, monkeypatch):
    """The build directory is named by its real path: the cache here is reached through a symlink, as
    the test suite's temporary caches reach the user's kernels; named by the link, each new link changed
    ninja's compile command, and ninja rebuilt the kernels (~65 s beside the other test worker, three
    times a suite run)."""
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    monkeypatch.setenv("SPECHARNESS_CACHE", str(tmp_path / "link"))
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    build_dir = (tmp_path / "real").resolve() / "kernels" / f"narrow_attention-{narrow_attention.build_key()}"
    build_dir.mkdir(parents=True)
    (build_dir / "lock").touch()
    calls = []

    def load(name, sources, build_directory, **kwargs):
        calls.append((sources, Path(build_directory), (Path(build_directory) / "lock").exists()))
        raise RuntimeError("stop here")

    from torch.utils import cpp_extension
    monkeypatch.setattr(cpp_extension, "load", load)
    assert narrow_attention._build() == "its build failed (RuntimeError: stop here)"
    assert narrow_attention._build() == "its build failed (RuntimeError: stop here)"
    (first, directory, stale), (second, _, _) = calls
    assert directory == build_dir and not stale
    assert first == second == [str(build_dir / source.name) for source in narrow_attention.LIBRARIES["avx512-bf16"][0]]
    for source in (*narrow_attention.LIBRARIES["avx512-bf16"][0], *narrow_attention.HEADERS):
        assert (build_dir / source.name).read_bytes() == source.read_bytes()


@pytest.mark.parametrize("why", [None, "its build failed (RuntimeError: no compiler)"])
def test_a_build_started_in_the_background_is_waited_for_once_and_its_outcome_kept(monkeypatch, capsys, why):
    """``TargetModel.load`` starts the build before converting the model; the first ``available`` joins
    that thread instead of building again, and takes its outcome (loaded, or why not)."""
    monkeypatch.setattr(narrow_attention, "_state", {})
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    started, release, calls = threading.Event(), threading.Event(), []

    def build():
        calls.append(threading.current_thread().name)
        started.set()
        assert release.wait(30)
        return why

    monkeypatch.setattr(narrow_attention, "_build", build)
    narrow_attention.build_in_background()
    narrow_attention.build_in_background()  # already building: no second thread
    assert started.wait(30)
    threading.Timer(0.2, release.set).start()  # available() must wait for the thread, not return early
    assert narrow_attention.available(torch.device("cpu"), narrow_attention.HEAD_DIMS[0]) is (why is None)
    assert narrow_attention.available(torch.device("cpu"), narrow_attention.HEAD_DIMS[0]) is (why is None)
    assert calls == ["narrow-attention-build"] and narrow_attention.reason() == why
    err = capsys.readouterr().err
    assert (why in err) if why else err == ""
    narrow_attention.build_in_background()  # tried already: nothing starts
    assert calls == ["narrow-attention-build"]


@pytest.mark.parametrize("background", [True, False])
def test_a_build_that_raises_gives_its_reason_not_a_traceback(monkeypatch, capsys, background):
    """A cache it cannot write fails before the compiler runs, in the background thread or in the first
    ``available`` (no background build where the engine's switch starts none): one line either way."""
    monkeypatch.setattr(narrow_attention, "_state", {})
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)

    def compile_and_load(kind):
        raise PermissionError("cannot write the cache")

    monkeypatch.setattr(narrow_attention, "_compile_and_load", compile_and_load)
    if background:
        narrow_attention.build_in_background()
    assert narrow_attention.available(torch.device("cpu"), narrow_attention.HEAD_DIMS[0]) is False
    assert narrow_attention.reason() == "its build failed (PermissionError: cannot write the cache)"
    err = capsys.readouterr().err
    assert "Traceback" not in err and "cannot write the cache" in err


def test_no_background_build_where_the_kernel_is_switched_off(monkeypatch):
    monkeypatch.setattr(narrow_attention, "_state", {})
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)  # the switch, not the CPU, stops it
    monkeypatch.setattr(narrow_attention, "_build", lambda: pytest.fail("built although switched off"))
    narrow_attention.build_in_background("off")
    assert "building" not in narrow_attention._state


def test_loading_a_bfloat16_cpu_target_starts_the_build_with_the_options_mode(monkeypatch):
    from specharness.engine_options import EngineOptions
    from specharness.model import TargetModel, loading
    started = []
    monkeypatch.setattr(narrow_attention, "build_in_background", started.append)

    def stop(*args):
        raise RuntimeError("not loaded in this test")

    monkeypatch.setattr(loading, "load_hf", stop)
    for dtype, device, options in (("bfloat16", "cpu", EngineOptions(narrow_attention="avx512")),
                                   ("float32", "cpu", None), ("bfloat16", "cuda", None)):
        with pytest.raises(RuntimeError, match="not loaded"):
            TargetModel.load(None, dtype, device, options)
    assert started == ["avx512"]


@pytest.mark.parametrize(("bf16", "capability", "kind"), [(True, "AVX512", "avx512-bf16"), (False, "AVX512", "avx2"),
                                                          (False, "AVX2", "avx2"), (False, "DEFAULT", None)])
def test_each_cpu_kind_builds_its_own_library_with_its_own_flags(monkeypatch, tmp_path, bf16, capability, kind):
    """AVX512-BF16 gets attention and the bfloat16 dot-product linear; a CPU with AVX2 alone (or AVX512
    without BF16) the linear kernel on float32 FMAs, compiled without an AVX512 flag it cannot run;
    neither: nothing is built, and the reason says so."""
    monkeypatch.setattr(narrow_attention, "_state", {})
    monkeypatch.setenv("SPECHARNESS_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    calls = []

    def load(name, sources, extra_cflags, **kwargs):
        calls.append(([Path(s).name for s in sources], extra_cflags))

    from torch.utils import cpp_extension
    monkeypatch.setattr(cpp_extension, "load", load)
    monkeypatch.setattr(torch.library, "register_fake", lambda name: lambda fn: fn)
    assert narrow_attention.library() == kind
    assert narrow_attention.loaded() is (kind is not None)
    if kind is None:
        assert calls == [] and "neither AVX512-BF16 nor AVX2" in narrow_attention.reason()
        return
    (sources, flags), = calls
    assert sources == [s.name for s in narrow_attention.LIBRARIES[kind][0]]
    assert ("narrow_attention.cpp" in sources) is ("-mavx512bf16" in flags) is (kind == "avx512-bf16")
    assert "-mavx2" in flags or kind == "avx512-bf16"
    if kind == "avx2":  # nothing this CPU cannot run, and a build directory of its own
        assert not any(flag.startswith(("-mavx512", "-mamx")) for flag in flags)
        assert narrow_attention.build_key("avx2") != narrow_attention.build_key("avx512-bf16")
    # the attention kernel is in the AVX512-BF16 build alone; elsewhere SDPA, and the reason names the CPU
    assert narrow_attention.available(torch.device("cpu"), narrow_attention.HEAD_DIMS[0]) is (kind == "avx512-bf16")
    assert (narrow_attention.reason() is None) is (kind == "avx512-bf16")
    if kind == "avx2":
        assert narrow_attention.reason().startswith("this CPU has no AVX512-BF16")


def test_the_library_sources_include_no_python_bindings_or_whole_cpp_api():
    """torch/extension.h (pybind11 and torch's whole C++ API) tripled every first build (46 -> 16 s on
    the 2-core AVX512-BF16 EPYC): the ops are registered with TORCH_LIBRARY and need ATen alone."""
    for sources, _, _ in narrow_attention.LIBRARIES.values():
        for path in (*sources, *narrow_attention.HEADERS):
            text = path.read_text()
            assert "torch/extension.h" not in text and "PYBIND11" not in text, path.name
            assert "#include <torch/library.h>" in text or path.suffix == ".h", path.name
