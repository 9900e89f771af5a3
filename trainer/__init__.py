"""The telemetry hook embedded in PyTorch training loops, and checkpoint-and-drain on decision."""
