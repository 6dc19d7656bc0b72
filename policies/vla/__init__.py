"""Real-size VLA architectures (SmolVLA) exported stage by stage: model, export, parity, benchmark."""
