"""Walk, hook and record PyTorch autograd graphs; build the Trace document.

This package is the only place that imports torch. Its modules import torch themselves, so
that `app.trace.document` (the format, torch-free) can be used by the runner and the web layer
without loading torch.
"""
