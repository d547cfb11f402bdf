"""Disclosure rules: request limits, small cells, the sliver guard."""
