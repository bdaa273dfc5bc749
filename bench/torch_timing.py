"""torch_timing.py: the one CUDA-event timing rule of the PyTorch benchmark scripts (bench/torch_*.py):
run fn `warmup` times, then time `iters` calls each between two CUDA events on the current stream,
and return the median in milliseconds (ours use the same rule in C++)."""
import torch


def median_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for e0, e1 in events:
        e0.record()
        fn()
        e1.record()
    torch.cuda.synchronize()
    ms = sorted(e0.elapsed_time(e1) for e0, e1 in events)
    return ms[len(ms) // 2]
