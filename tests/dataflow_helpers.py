"""Small DataFlows shared by the parallel-flow tests."""
from inputpipe.dataflow import DataFlow


class Indexed(DataFlow):
    """``[i]`` for i in range(n): a plain source with a length and no saved state (not resumable),
    as a user's own DataFlow usually is."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [i]
