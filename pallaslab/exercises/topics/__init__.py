"""The exercises, one module per course notebook, in the course's order."""

from pallaslab.exercises.topics.accumulators import ACCUMULATORS
from pallaslab.exercises.topics.attention import ATTENTION
from pallaslab.exercises.topics.dmas import DMAS
from pallaslab.exercises.topics.grids import GRIDS
from pallaslab.exercises.topics.prefetch import PREFETCH
from pallaslab.exercises.topics.reductions import REDUCTIONS

ALL_TOPICS = (GRIDS, ACCUMULATORS, REDUCTIONS, PREFETCH, ATTENTION, DMAS)
