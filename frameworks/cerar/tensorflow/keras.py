"""Horovod's spelling `import horovod.tensorflow.keras as hvd`: here it is cerar.keras itself
(Keras 3, on Keras's active backend)."""
import sys

import cerar.keras

sys.modules[__name__] = cerar.keras
