"""A module no test imports: the Tasks backend must never import it from a stored task path."""

raise AssertionError("tests.testapp.never_imported was imported")
