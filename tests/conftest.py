"""Shared fixtures: the embedded SmolLM2 (loaded once per session) and its Spec-Bench prompts."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def smol():
    from specharness.target import TargetModel
    return TargetModel.load()


@pytest.fixture(scope="session")
def first_questions():
    """The first question of every subtask, in the paper's subtask order."""
    from tasks.specbench import SUBTASKS, find_question_file, load_questions, select
    return select(load_questions(find_question_file()), SUBTASKS, 1)
