"""Megatron-LM's theoretical memory formula, reproduced to the byte, and a model mapped to Megatron's arguments."""
