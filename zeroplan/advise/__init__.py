"""The advisor: policy, the two decision trees, candidates, and Advice (recommendation and trace)."""
