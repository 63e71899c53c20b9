"""
What the crash tests' subprocesses run: the workflows and steps (``app``), a store that dies at a
chosen write (``crash_store``), the process entry point (``node``), and the test side's helpers
for spawning, killing and checking them (``harness``).
"""
