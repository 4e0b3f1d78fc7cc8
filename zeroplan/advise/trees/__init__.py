"""The decision trees: the source article's, and zeroplan's default that corrects it."""
