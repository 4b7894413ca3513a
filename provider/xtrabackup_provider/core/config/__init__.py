"""The fleet config: the pydantic schema (no runtime imports), loading YAML with errors that
name the file and field, and the wiring from config to core objects for the CLI.
"""
