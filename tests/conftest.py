"""Shared test set-up: the library lives in plugins/ (pytest.ini puts it on sys.path)."""
