"""schedules package (under construction)."""
