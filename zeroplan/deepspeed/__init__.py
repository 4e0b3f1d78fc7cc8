"""DeepSpeed: reading and writing ds_config, its key vocabulary, the batch rule, Hugging Face "auto" values, DeepSpeed's own estimator reproduced."""
