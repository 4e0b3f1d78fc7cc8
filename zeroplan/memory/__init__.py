"""Memory per GPU: byte recipes, model states per ZeRO stage, engine buffers, activations, the per-stage estimate, capacity questions, the configuration grid."""
