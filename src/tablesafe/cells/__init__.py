"""Per-cell aggregates, exact fixed-point sums and the record choice."""
