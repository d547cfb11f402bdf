"""Perturbation tables: the PTable type and its CSV files (Destatis and ABS layouts)."""
