"""Destinations: where a process writes, as effects failing with `DestinationError`."""

from migrate._destinations._helper import destination
from migrate._destinations._sql import SqlDestination

__all__ = ["SqlDestination", "destination"]
