"""The advisor's parallelism search (`zeroplan advise --search-parallelism`): tp x pp x cp x dp (x ep) x ZeRO stage x
checkpointing x micro-batch layouts fitted with zeroplan's mesh memory model and ranked by predicted step time
(docs/advisor.md, "Parallelism search"). Pure: no rich, typer or yaml, no I/O."""
