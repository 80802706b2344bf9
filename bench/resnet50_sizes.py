"""The parameter tensors of ResNet-50 (torchvision's resnet50, in model.parameters() order):
161 tensors, 25,557,032 floats. A training step all-reduces one gradient of each.

    from resnet50_sizes import SHAPES, numel
"""
from math import prod


def _shapes():
    out = [(64, 3, 7, 7), (64,), (64,)]  # conv1, bn1 weight and bias
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            out += [(planes, inplanes, 1, 1), (planes,), (planes,),      # conv1, bn1
                    (planes, planes, 3, 3), (planes,), (planes,),        # conv2, bn2
                    (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]  # conv3, bn3
            if b == 0:  # the downsample projection of the first block of each stage
                out += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    return out + [(1000, 2048), (1000,)]  # fc weight and bias


SHAPES = _shapes()


def numel(shape):
    return prod(shape)


assert len(SHAPES) == 161 and sum(map(numel, SHAPES)) == 25_557_032

if __name__ == "__main__":
    print(f"{len(SHAPES)} tensors, {sum(map(numel, SHAPES))} floats, largest {max(map(numel, SHAPES))}")
