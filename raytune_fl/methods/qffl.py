"""Placeholder: filled in by the method-library work (#3)."""
