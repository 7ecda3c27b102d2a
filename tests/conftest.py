"""Shared fixtures: the embedded SmolLM2 (loaded once per session) and the built-in questions.

The suite depends on nothing outside the repository: questions come from the built-in sample
(``tasks/sample_questions.jsonl``) whatever the environment says, and everything a test writes
goes to a temporary cache directory. Only the converted default model and the engine's built C++
kernel are shared with the user's cache (converting takes ~30 s, building ~15 s; both are read-only
once written).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
import torch


def _pin_xdist_worker() -> int:
    """Under pytest-xdist (the default run: ``-n 2``) each worker is pinned to a core of its own and
    runs one torch thread: two workers of two threads each on two cores would spin-wait on each other
    (several times slower). Run alone (``-p no:xdist`` or ``-n 0``), the suite keeps two threads."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return 2
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})
    return 1


torch.set_num_threads(_pin_xdist_worker())

# Spec-Bench's full file only where a test asks for it (see ``specbench_file``), never by default
SPEC_BENCH_ENV = "SPECHARNESS_TEST_SPECBENCH"
_USER_CACHE = Path(os.environ.get("SPECHARNESS_CACHE", Path.home() / ".cache" / "specharness")).absolute()
for _name in ("SPECHARNESS_SPECBENCH", "SPECHARNESS_SPECBENCH_URL"):
    os.environ.pop(_name, None)
# the engine's "auto" configuration is measured per machine (minutes of compiling); the suite runs
# the float32 eager reference, where greedy outputs must match vanilla token for token
os.environ["SPECHARNESS_ENGINE"] = "float32/none"
# compiled tests go through torch.compile: a tiny model's graph built as an AOTInductor package costs
# ~7 s of C++ compiling on one core, twice torch.compile's (64 packages were half the suite's
# compiling). The store's own tests, and the drafter-stack test that exports every stack kind, ask
# for it with the ``graph_store`` fixture.
os.environ["SPECHARNESS_AOT_GRAPHS"] = "0"


def _link_shared(root: Path, source: Path) -> None:
    """``root``'s models/ and kernels/ -> ``source``'s: converted models and built kernels are keyed by
    their inputs, so caches may share them; everything else in ``root`` stays its own."""
    for shared in ("models", "kernels"):
        (source / shared).mkdir(parents=True, exist_ok=True)
        (root / shared).symlink_to(source / shared, target_is_directory=True)


@pytest.fixture(scope="session", autouse=True)
def temporary_cache(tmp_path_factory):
    """$SPECHARNESS_CACHE -> a fresh directory; its ``models/`` is the user's converted models and
    its ``kernels/`` the user's built C++ kernels (keyed by their source: read-only once built)."""
    root = tmp_path_factory.mktemp("specharness-cache")
    _link_shared(root, _USER_CACHE)
    old = os.environ.get("SPECHARNESS_CACHE")
    os.environ["SPECHARNESS_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("SPECHARNESS_CACHE", None)
    else:
        os.environ["SPECHARNESS_CACHE"] = old


@pytest.fixture
def own_cache(monkeypatch, tmp_path, temporary_cache):
    """$SPECHARNESS_CACHE -> this test's own empty cache, sharing the session's converted models and
    built kernels (without them, a child process that loads the kernels, as a graph build does,
    rebuilds them: 30 s alone, ~65 s beside the other test worker)."""
    _link_shared(tmp_path, temporary_cache)
    monkeypatch.setenv("SPECHARNESS_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def graph_store(monkeypatch):
    """The graph store on (the user's default, ``SPECHARNESS_AOT_GRAPHS=1``), for this test only."""
    monkeypatch.setenv("SPECHARNESS_AOT_GRAPHS", "1")


@pytest.fixture(scope="session")
def smol():
    from specharness.model import TargetModel
    return TargetModel.load()


@pytest.fixture(scope="session")
def vanilla_greedy(smol):
    """``ref(prompt_ids, n)``: SmolLM2's vanilla greedy tokens, computed once per prompt, length and
    thread count for all the greedy-identity tests that compare against them."""
    from specharness.engine import generate
    from specharness.methods.vanilla import NoDraft
    from specharness.verify import greedy
    memo: dict[tuple, list[int]] = {}

    def ref(prompt_ids, n: int) -> list[int]:
        key = (tuple(prompt_ids), n, torch.get_num_threads())
        if key not in memo:
            memo[key] = generate(smol, NoDraft(), greedy, list(prompt_ids), n).token_ids
        return list(memo[key])
    return ref


@pytest.fixture(scope="session")
def sample_questions():
    """Every question of the built-in sample: the file the tests pin."""
    from specharness.tasks.specbench import SAMPLE_FILE, load_questions
    return load_questions(SAMPLE_FILE)


@pytest.fixture(scope="session")
def first_questions(sample_questions):
    """The first question of every subtask, in the paper's subtask order."""
    from specharness.tasks.specbench import SUBTASKS, select
    return select(sample_questions, SUBTASKS, 1)


@pytest.fixture(params=["share", pytest.param("all", marks=pytest.mark.slow)])
def identity_questions(request, first_questions):
    """The questions of a greedy-identity test on SmolLM2. In the default run, the first questions of
    two subtasks, a pair picked by the test's name, so that between them the suite's identity tests
    cover every subtask at a third of the cost (issue 34: a test run within 15 minutes); under
    ``-m slow``, all six."""
    if request.param == "all":
        return first_questions
    pair = zlib.crc32(request.node.name.encode()) % 3  # the name carries the test's parameters: stable
    return first_questions[2 * pair:2 * pair + 2]


@pytest.fixture
def specbench_file():
    """Spec-Bench's full question.jsonl, for the tests that ask for it through
    $SPECHARNESS_TEST_SPECBENCH; skipped when it is not set or the file is absent."""
    path = os.environ.get(SPEC_BENCH_ENV)
    if not path or not Path(path).is_file():
        pytest.skip(f"set ${SPEC_BENCH_ENV} to Spec-Bench's question.jsonl to run this test")
    return Path(path)


@pytest.fixture
def narrow_kernel():
    """Skips a test where the engine's C++ attention kernel cannot run (no AVX512-BF16, no compiler)."""
    from specharness.model.accel import narrow_attention
    if not narrow_attention.available(torch.device("cpu"), 64):
        pytest.skip(f"the narrow attention kernel is unavailable here: {narrow_attention.reason()}")


@pytest.fixture
def kernel_path(request):
    """kernel_path(kind): a test's narrow kernel path ("" = SDPA), skipping the test where that path
    cannot run here."""
    def pick(kind: str) -> str:
        if kind:
            request.getfixturevalue("narrow_kernel")
        if kind == "amx" and not torch.cpu._init_amx():
            pytest.skip("no AMX here (the CPU lacks it or the OS refused its tile state): the kernel's AMX path cannot run")
        return kind
    return pick
