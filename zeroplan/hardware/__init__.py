"""Hardware: GPU presets and what a node's fabric offers."""
