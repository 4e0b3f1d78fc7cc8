"""CI checks: plan files, rules (one module per group), the runner, report formats."""
