"""The protected table and its outputs: footnotes, text, XLSX."""
