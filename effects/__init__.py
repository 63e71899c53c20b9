"""effects package (under construction)."""
