"""
The operator dashboard's parts (``effects.durable.dashboard`` is the public module): the pages as
HTML (``pages``), the security of every request (``guard``), the routes (``routes``), and the
``dashboard`` command's server (``serve``). Only ``routes`` and ``serve`` import Starlette.
"""
