"""graphbreak-doctor: why torch.compile cannot capture a model layer, and what to change."""

__version__ = "0.1.0"
