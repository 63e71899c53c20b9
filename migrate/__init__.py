"""migrate package (under construction)."""
