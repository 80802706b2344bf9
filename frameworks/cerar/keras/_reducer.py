"""What the JAX and torch backends' gradient reducers share: their settings, with
gradient_predivide_factor split into the all-reduce's prescale and postscale (Horovod's)."""
from cerar._process_sets import set_argument


class ScaledReducer:
    def __init__(self, compression, op, gradient_predivide_factor, process_set):
        self.compression, self.op, self.process_set = compression, op, set_argument(process_set)
        self.prescale = 1.0 / gradient_predivide_factor
        self.postscale = float(gradient_predivide_factor)
