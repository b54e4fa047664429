"""The claim."""
