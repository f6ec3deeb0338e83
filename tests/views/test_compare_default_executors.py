"""The Compare view named no executors of its own: with none named it runs the API's one
default (`choice.default_executors`), and its notes say which."""

from kernels import CATALOG

import pallaslab
from pallaslab.execute.executors.choice import default_executors
from pallaslab.views.compare import attach_comparison


def test_with_no_executors_named_the_view_runs_the_api_default():
    fn, args = CATALOG["elementwise_2d_add"].case()
    wb = pallaslab.inspect(fn, *args)
    comparison = attach_comparison(wb, reference=lambda x, y: x + y)
    (pair, note) = default_executors(wb.capture, lambda x, y: x + y)
    assert comparison.executors == pair
    assert note in comparison.notes
