"""autograd-lab: see PyTorch autograd at work."""

__version__ = "0.1.0"
