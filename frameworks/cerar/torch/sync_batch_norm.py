"""SyncBatchNorm: batch normalization over the whole batch of all ranks, torch.nn.SyncBatchNorm's
semantics on cerar's collectives (CPU and CUDA tensors).

Training forward: every rank allgathers its per-channel (count, mean, sum of squared
deviations), each rank combines them in float64 (Chan's parallel formula, exact for uneven and
empty batches), normalizes its own part with the global mean and biased variance, and updates
the running mean and the running variance with the unbiased one, as torch does. Backward: the
per-channel sums of dy and dy * (x - mean) are summed over the ranks (one all-reduce) to form
the input gradient; weight and bias gradients are this rank's share, as in torch (the
optimizer's reduction adds the ranks' shares). A rank whose batch is empty still takes part in
both collectives. Eval mode, a single rank or an uninitialized cerar: plain batch norm, no
communication. The collectives are named "sync_batch_norm.*.noname.<n>" in call order, so every
rank must run the layers in the same order (as with torch.distributed).
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from cerar import Sum, is_initialized, size
from cerar._frontend import auto_name
from cerar._handle import synchronize
from cerar.torch import ops


def _by_channel(t, dtype):
    """(C, elements per channel) view of an (N, C, *) tensor, in `dtype`."""
    return t.transpose(0, 1).reshape(t.shape[1], -1).to(dtype)


def _channel_shape(t):
    return [1, t.shape[1]] + [1] * (t.dim() - 2)


def _accumulator(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        x = input.contiguous()
        channels = x.shape[1]
        count = x.numel() // channels
        xc = _by_channel(x, torch.float64)
        if count > 0:
            mean = xc.mean(1)
            m2 = (xc - mean[:, None]).pow(2).sum(1)
        else:
            mean = m2 = torch.zeros(channels, dtype=torch.float64)
        mine = torch.cat([torch.tensor([float(count)], dtype=torch.float64), mean.cpu(),
                          m2.cpu()]).reshape(1, -1)
        stats = synchronize(ops.allgather_async(mine, auto_name("sync_batch_norm.stats")))
        counts, means, m2s = stats[:, :1], stats[:, 1:channels + 1], stats[:, channels + 1:]
        total = float(counts.sum())
        if total <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got "
                             f"{int(total)} over all ranks")
        global_mean = (counts * means).sum(0) / total
        global_m2 = (m2s + counts * (means - global_mean).pow(2)).sum(0)
        invstd = (global_m2 / total + eps).rsqrt()
        with torch.no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(
                    global_mean.to(running_mean.device, running_mean.dtype), alpha=momentum)
            if running_var is not None:
                running_var.mul_(1 - momentum).add_(
                    (global_m2 / (total - 1)).to(running_var.device, running_var.dtype),
                    alpha=momentum)
        acc = _accumulator(x.dtype)
        shape = _channel_shape(x)
        mean_acc = global_mean.to(x.device, acc)
        invstd_acc = invstd.to(x.device, acc)
        y = (x.to(acc) - mean_acc.view(shape)) * invstd_acc.view(shape)
        if weight is not None:
            y = y * weight.to(acc).view(shape)
        if bias is not None:
            y = y + bias.to(acc).view(shape)
        ctx.save_for_backward(x, weight, mean_acc, invstd_acc)
        ctx.total = total
        ctx.has_bias = bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd = ctx.saved_tensors
        acc = mean.dtype
        channels = x.shape[1]
        shape = _channel_shape(x)
        dy = grad_output.contiguous()
        xmu = _by_channel(x, acc) - mean[:, None]
        dyc = _by_channel(dy, acc)
        sum_dy = dyc.sum(1)
        sum_dy_xmu = (dyc * xmu).sum(1)
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            local = torch.cat([sum_dy, sum_dy_xmu]).to("cpu", torch.float64)
            both = synchronize(ops.allreduce_async_(local, None,
                                                    auto_name("sync_batch_norm.grad"), Sum))
            mean_dy = (both[:channels] / ctx.total).to(x.device, acc).view(shape)
            mean_dy_xmu = (both[channels:] / ctx.total).to(x.device, acc).view(shape)
            scale = invstd.view(shape)
            if weight is not None:
                scale = scale * weight.to(acc).view(shape)
            xmu_full = x.to(acc) - mean.view(shape)
            grad_input = ((dy.to(acc) - mean_dy - xmu_full * invstd.pow(2).view(shape) *
                           mean_dy_xmu) * scale).to(x.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(weight.dtype if weight is not None else x.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """torch.nn.SyncBatchNorm over cerar's ranks (Horovod's hvd.SyncBatchNorm): input (N, C, *),
    statistics over the batches of all ranks in training, running statistics in eval."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None):
        if process_group is not None and getattr(process_group, "process_set_id", 0) != 0:
            raise ValueError("SyncBatchNorm: process sets other than the global one are not "
                             "supported")
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        running_mean = self.running_mean if keep else None
        running_var = self.running_var if keep else None
        if not (batch_stats and self.training and is_initialized() and size() > 1):
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                batch_stats, factor, self.eps)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, running_mean, running_var,
                                    self.eps, factor)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """A copy of `module` whose batch norm layers are SyncBatchNorm (their parameters and
        buffers kept), as torch.nn.SyncBatchNorm.convert_sync_batchnorm."""
        converted = module
        if isinstance(module, _BatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted
