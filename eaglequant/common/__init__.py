"""Helpers every layer may use: errors and their exit codes, environment switches, memory release, progress events,
JSON field readers.
"""
