"""The data owner's offline tools: catalog drafts, replicate weights, demo data."""
