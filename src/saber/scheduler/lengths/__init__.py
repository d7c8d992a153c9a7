"""What the scheduler expects a request's answer to be: per task type, learned from
every finished answer (``LengthEstimate``), conditioned on what the request carries
where that predicts better (``saber.scheduler.lengths._conditioned``), with a prompt's
size in tokens from its bytes (``PromptSize``); ``TaskLengths`` is their face."""

from saber.scheduler.lengths._conditioned import NOTHING, Carried
from saber.scheduler.lengths._histogram import LengthEstimate
from saber.scheduler.lengths._prompt_size import PromptSize
from saber.scheduler.lengths._task_lengths import Dist, TaskLengths

__all__ = ["NOTHING", "Carried", "Dist", "LengthEstimate", "PromptSize", "TaskLengths"]
