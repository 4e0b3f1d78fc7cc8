"""Models: family descriptions (data), exact parameter counting, model presets, Hugging Face config.json and YAML specs."""
