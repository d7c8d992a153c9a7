"""Answer lengths that follow their request: a translation's answer drawn from its input.

In the paper's workloads every answer's length is drawn on its own, whatever its
prompt. Real traffic is not like that: a translation's answer is about as long as the
code it translates. ``joint_outputs`` draws code_translation's answers from their
inputs by the length ratio of a real pair of programs (CodeXGLUE's 10,295 Java/C#
training pairs, ``data/README.md``): the answer is the input times one pair's C#/Java
ratio, scaled so that the task's mean answer stays its configured one. Other tasks keep
the independent draw.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import numpy as np

from saber.config import TaskType

JOINT_TASKS = ("code_translation",)
"""Tasks whose answer ``joint_outputs`` draws from its input."""
_PAIRS = Path(__file__).with_name("data") / "codexglue_java_cs_train_lengths.csv"


@functools.cache
def translation_ratios() -> np.ndarray:
    """C# over Java length (characters) of each CodeXGLUE training pair."""
    with _PAIRS.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    java = np.array([float(r["java_chars"]) for r in rows])
    cs = np.array([float(r["cs_chars"]) for r in rows])
    keep = (java > 0) & (cs > 0)
    ratios: np.ndarray = cs[keep] / java[keep]
    ratios.setflags(write=False)
    return ratios


def joint_outputs(rng: np.random.Generator, task: TaskType, inputs: np.ndarray) -> np.ndarray:
    """Answer lengths of ``task``'s requests with these input lengths: each input times
    a pair's ratio, scaled so that the mean answer is the task's mean (the input's
    mean times the ratio's), within 1..max_tokens."""
    ratios = translation_ratios()
    picked = ratios[rng.integers(0, len(ratios), len(inputs))]
    scale = task.mean_output_tokens / (task.mean_input_tokens * float(ratios.mean()))
    out = np.rint(inputs * picked * scale)
    return np.clip(out, 1, task.max_tokens).astype(np.int64)
