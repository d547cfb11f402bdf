"""The catalog: variables, categories, groupings, hierarchies, magnitudes, the dataset."""
